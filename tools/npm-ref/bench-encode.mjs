// bench-encode.mjs: encode speed of js-tiktoken versus `moeserve tokenize --bench`.
//
//   node tools/npm-ref/bench-encode.mjs --moeserve BIN --tokenizer FILE
//        [--reps N] [--mixed-bytes B] [--big-bytes B] [--keep]
//
// Texts: "mixed", the gen-cases.mjs cases joined with "\n" up to about
// --mixed-bytes (default 4000000) bytes, and "nospace", gen-cases' --big
// string (--big-bytes, default 1000000, no white space at all).
// js-tiktoken (o200k_base, ordinary encoding) is timed in this process, best
// of --reps (default 3) runs after one warm-up.  moeserve is run as
//   BIN tokenize --tokenizer FILE --bench TEXTFILE
// which must encode the file's bytes repeatedly in one process and print
// "encode: X MB/s" as its last line.  MB = 10^6 bytes of UTF-8 input, on both
// sides.  Without --moeserve only js-tiktoken is timed.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { referenceEncoders } from "./o200k.mjs";
import { bigString, generateCase } from "./gen-cases.mjs";

function usage(msg) {
  if (msg) console.error(`bench-encode: ${msg}`);
  console.error("usage: node tools/npm-ref/bench-encode.mjs --moeserve BIN --tokenizer FILE [--reps N] [--mixed-bytes B] [--big-bytes B] [--keep]");
  process.exit(2);
}

const o = { bin: null, tok: null, reps: 3, mixedBytes: 4000000, bigBytes: 1000000, keep: false };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i], v = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
  if (a === "--moeserve") o.bin = v();
  else if (a === "--tokenizer") o.tok = v();
  else if (a === "--reps") o.reps = Number(v());
  else if (a === "--mixed-bytes") o.mixedBytes = Number(v());
  else if (a === "--big-bytes") o.bigBytes = Number(v());
  else if (a === "--keep") o.keep = true;
  else usage(`unknown argument ${a}`);
}
if (o.bin && !o.tok) usage("--moeserve needs --tokenizer");
if (!(o.reps >= 1) || !(o.mixedBytes > 0) || !(o.bigBytes > 0)) usage("bad number");

function mixedText(bytes) {
  const parts = [];
  let n = 0;
  for (let i = 0; n < bytes; i++) {
    const t = generateCase(i).text;
    parts.push(t);
    n += Buffer.byteLength(t, "utf8") + 1;
  }
  return parts.join("\n");
}

const texts = [["mixed", mixedText(o.mixedBytes)], ["nospace", bigString(o.bigBytes)]];
const enc = referenceEncoders();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moeserve-bench-"));

const rows = [];
let failed = false;
for (const [name, text] of texts) {
  const bytes = Buffer.byteLength(text, "utf8");
  let ntok = enc.plain(text).length;                     // warm-up
  let best = Infinity;
  for (let r = 0; r < o.reps; r++) {
    const t0 = process.hrtime.bigint();
    ntok = enc.plain(text).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const js = bytes / best / 1e6;
  let c = null;
  if (o.bin) {
    const file = path.join(dir, `${name}.txt`);
    fs.writeFileSync(file, text);
    const res = spawnSync(o.bin, ["tokenize", "--tokenizer", o.tok, "--bench", file], { encoding: "utf8", maxBuffer: 64 << 20 });
    const last = (res.stdout ?? "").trimEnd().split("\n").pop();
    const m = /^encode: ([0-9.]+(?:e[+-]?\d+)?) MB\/s$/.exec(last ?? "");
    if (res.error || res.status !== 0 || !m) {
      console.error(`bench-encode: ${o.bin} --bench ${name}: ${res.error?.message ?? `exit status ${res.status}`}, last line ${JSON.stringify(last)}\n${(res.stderr ?? "").slice(-2000)}`);
      failed = true;
    } else c = Number(m[1]);
  }
  rows.push({ name, bytes, ntok, js, c });
}
if (!o.keep) fs.rmSync(dir, { recursive: true, force: true });
else console.log(`texts kept in ${dir}`);

console.log(`text      bytes     tokens   js-tiktoken MB/s   moeserve MB/s   moeserve/js`);
for (const r of rows)
  console.log(`${r.name.padEnd(8)} ${String(r.bytes).padStart(8)} ${String(r.ntok).padStart(9)}   ${r.js.toFixed(2).padStart(16)}   ` +
    `${r.c === null ? "-".padStart(13) : r.c.toFixed(2).padStart(13)}   ${r.c === null ? "-" : (r.c / r.js).toFixed(2) + "x"}`);
process.exit(failed ? 1 : 0);
