// tokenizer_npm.mjs: moeserve's tokenizer against an independent reference
// (js-tiktoken o200k_base, tools/npm-ref/).
//
//   npm ci --prefix tools/npm-ref          (done here when js-tiktoken is missing)
//   node tools/npm-ref/build-tokenizer.mjs build/o200k_harmony.json
//   node tests/models/tokenizer_npm.mjs --moeserve BIN --tokenizer FILE [--cases N]
//        [--seed S] [--timeout SECONDS]
//
// Encodes the cases of tools/npm-ref/gen-cases.mjs with js-tiktoken (ordinary
// encoding: text that looks like a special token is ordinary text) and with
//   BIN tokenize --tokenizer FILE --jsonl
//     stdin: one JSON string per line; stdout: one line per input, the ids
//     space-separated (empty line for no ids); exit status 0.
// run once for all cases; ids must be identical.  Then
//   BIN tokenize --tokenizer FILE --decode --jsonl
//     stdin: one line of space-separated ids per case; stdout: one JSON
//     string per line; exit status 0.
// is fed the reference ids and must give back each string exactly.
// Every 8th input line is written with all non-ASCII as \uXXXX escapes
// (surrogate pairs above U+FFFF); the others as JSON.stringify writes them.
//
// The expectation is tiktoken's (Rust regex) behaviour.  Where js-tiktoken's
// JavaScript regex provably differs from it (DEVIATIONS below) the expected
// ids come from the same ranks split with a corrected JS pattern
// (rustSemanticsJsPattern in tools/npm-ref/o200k.mjs); those cases are counted
// as "corrected".  Cases holding a code point of UNICODE_EXCLUDED (Unicode
// version differences between PCRE2 10.42, Rust regex and Node) are not
// compared; gen-cases never produces them.
//
// Last line: "tokenizer-npm: P passed, F failed" (P + F = cases compared).
// Exit status 0 when F = 0, 1 otherwise (also when js-tiktoken cannot be
// installed: without the reference nothing is proven), 2 on usage errors.

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const npmRef = path.join(here, "../../tools/npm-ref");

// js-tiktoken comes from tools/npm-ref/package-lock.json: `npm ci` when it is
// missing or not the pinned version.  Without it (no registry, no npm cache)
// the test fails: exactness is this test's whole point.
function ensureReference() {
  const want = JSON.parse(fs.readFileSync(path.join(npmRef, "package.json"), "utf8")).dependencies["js-tiktoken"];
  let have = null;
  try {
    have = JSON.parse(fs.readFileSync(path.join(npmRef, "node_modules/js-tiktoken/package.json"), "utf8")).version;
  } catch { /* not installed */ }
  if (have === want) return;
  console.error(`tokenizer_npm: js-tiktoken ${have ?? "missing"}, want ${want}: npm ci --prefix ${npmRef}`);
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const r = spawnSync(npm, ["ci", "--prefix", npmRef, "--no-audit", "--no-fund"], { stdio: ["ignore", 2, 2] });
  if (r.error || r.status !== 0) {
    console.log(`tokenizer-npm: npm ci failed (${r.error?.message ?? "exit status " + r.status})`);
    console.log("tokenizer-npm: 0 passed, 1 failed");
    process.exit(1);
  }
}
ensureReference();
const ref = await import(path.join(npmRef, "o200k.mjs"));
const gen = await import(path.join(npmRef, "gen-cases.mjs"));

// Code points where js-tiktoken's JavaScript regex differs from tiktoken's
// Rust regex for the o200k pattern.  Found by ref.findRegexDeviations() (every
// code point 0..0x10FFFF: JS \s versus Unicode White_Space, and the (?i:)
// contraction letters versus their simple-case-fold closures), re-checked at
// every run below, and confirmed against the Rust tiktoken core (see
// tools/npm-ref/o200k.mjs).  Cases holding them are compared with the
// corrected expectation (ref.rustSemanticsJsPattern()).
const DEVIATIONS = [
  { cp: 0x0085, name: "NEXT LINE (NEL)",
    reason: "Unicode White_Space, so Rust \\s matches it; ECMAScript \\s (WhiteSpace + LineTerminator) does not" },
  { cp: 0xFEFF, name: "ZERO WIDTH NO-BREAK SPACE",
    reason: "ECMAScript \\s includes <ZWNBSP>; it is not White_Space, so Rust \\s does not match it" },
  { cp: 0x017F, name: "LATIN SMALL LETTER LONG S",
    reason: "simple case folding maps it to 's', so Rust (?i:'s) matches \"'\u017F\"; js-tiktoken spells the group out as 's|'S|... without the i flag" },
];

function usage(msg) {
  if (msg) console.error(`tokenizer_npm: ${msg}`);
  console.error("usage: node tests/models/tokenizer_npm.mjs --moeserve BIN --tokenizer FILE [--cases N] [--seed S] [--timeout SECONDS]");
  process.exit(2);
}

function parseArgs(argv) {
  const o = { bin: null, tok: null, n: gen.DEFAULT_N, seed: gen.DEFAULT_SEED, timeout: 600 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    if (a === "--moeserve") o.bin = v();
    else if (a === "--tokenizer") o.tok = v();
    else if (a === "--cases") o.n = Number(v());
    else if (a === "--seed") o.seed = Number(v());
    else if (a === "--timeout") o.timeout = Number(v());
    else usage(`unknown argument ${a}`);
  }
  if (!o.bin || !o.tok) usage("--moeserve and --tokenizer are required");
  if (!Number.isInteger(o.n) || o.n < 1 || !Number.isInteger(o.seed) || !(o.timeout > 0)) usage("bad number");
  return o;
}

const asciiJson = (s) => JSON.stringify(s).replace(/[\u007f-\uffff]/g,
  (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

// Run BIN with args, feed `input`, collect stdout/stderr.
function run(bin, args, input, timeoutS) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(bin, args, { stdio: ["pipe", "pipe", "pipe"] });
    } catch (e) {
      resolve({ error: e.message });
      return;
    }
    const out = [], err = [];
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; child.kill("SIGKILL"); }, timeoutS * 1000);
    child.stdout.on("data", (b) => out.push(b));
    child.stderr.on("data", (b) => err.push(b));
    child.stdin.on("error", () => {});         // EPIPE when it dies early; reported via exit status
    child.on("error", (e) => { clearTimeout(timer); resolve({ error: e.message }); });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, timedOut, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") });
    });
    child.stdin.end(input);
  });
}

// Output lines; null and a reason when the process failed.
function outputLines(res, what, n) {
  if (res.error) return [null, `${what}: cannot run: ${res.error}`];
  if (res.timedOut) return [null, `${what}: killed after the timeout`];
  if (res.code !== 0) return [null, `${what}: exit status ${res.code ?? "signal " + res.signal}\n${res.stderr.slice(-2000)}`];
  const lines = res.stdout.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  else return [null, `${what}: output does not end with a newline`];
  if (lines.length !== n) return [null, `${what}: ${lines.length} output lines for ${n} inputs\n${res.stderr.slice(-2000)}`];
  return [lines, null];
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

function showIds(ids, at) {
  if (ids.length <= 64) return `[${ids.join(" ")}] (${ids.length})`;
  const lo = Math.max(0, at - 16), hi = Math.min(ids.length, at + 16);
  return `[${lo ? "... " : ""}${ids.slice(lo, hi).join(" ")}${hi < ids.length ? " ..." : ""}] (${ids.length} ids, showing ${lo}..${hi - 1})`;
}

function clip(s, n = 2000) {
  return s.length <= n ? s : s.slice(0, n) + `... (${s.length} chars)`;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const warn = ref.unicodeVersionWarning();
  if (warn) console.error(`tokenizer_npm: ${warn}`);

  // The reference's own premise: the regex deviations are exactly DEVIATIONS.
  const found = ref.findRegexDeviations().map((d) => d.cp).join(",");
  const listed = DEVIATIONS.map((d) => d.cp).sort((a, b) => a - b).join(",");
  if (found !== listed) {
    console.error(`tokenizer_npm: this Node's regex deviates at [${found}], DEVIATIONS lists [${listed}]; update DEVIATIONS and rustSemanticsJsPattern()`);
    console.log("tokenizer-npm: 0 passed, 1 failed");
    process.exit(1);
  }
  console.log("deviations of js-tiktoken's regex from tiktoken (Rust), expectation corrected:");
  for (const d of DEVIATIONS)
    console.log(`  U+${d.cp.toString(16).toUpperCase().padStart(4, "0")} ${d.name}: ${d.reason}`);

  const enc = ref.referenceEncoders();
  const devChars = new Set(DEVIATIONS.map((d) => String.fromCodePoint(d.cp)));
  const cases = [];
  const stats = new Map();
  const stat = (cat) => {
    if (!stats.has(cat)) stats.set(cat, { cases: 0, compared: 0, skipped: 0, corrected: 0, encFail: 0, decFail: 0 });
    return stats.get(cat);
  };
  const t0 = Date.now();
  let refBytes = 0;
  for (let i = 0; i < o.n; i++) {
    const { cat, text } = gen.generateCase(i, o.seed);
    const st = stat(cat);
    st.cases++;
    if (ref.firstExcludedCodePoint(text) >= 0) { st.skipped++; continue; }
    const want = enc.rust(text);
    const plain = enc.plain(text);
    const corrected = firstDiff(want, plain) >= 0;
    if (corrected) {
      if (![...text].some((c) => devChars.has(c))) {
        console.error(`tokenizer_npm: reference error: case ${i} differs between js-tiktoken and the corrected pattern ` +
          `without a DEVIATIONS code point: ${clip(JSON.stringify(text), 300)}`);
        console.log("tokenizer-npm: 0 passed, 1 failed");
        process.exit(1);
      }
      st.corrected++;
    }
    st.compared++;
    refBytes += Buffer.byteLength(text, "utf8");
    cases.push({ i, cat, text, want, corrected });
  }
  const refS = (Date.now() - t0) / 1000;
  console.log(`reference: ${cases.length} cases, ${refBytes} bytes, js-tiktoken twice in ${refS.toFixed(1)} s`);

  // Encode with moeserve.
  const encIn = cases.map((c, k) => (k % 8 === 7 ? asciiJson(c.text) : JSON.stringify(c.text))).join("\n") + "\n";
  const t1 = Date.now();
  const [encLines, encErr] = outputLines(
    await run(o.bin, ["tokenize", "--tokenizer", o.tok, "--jsonl"], encIn, o.timeout), "tokenize --jsonl", cases.length);
  const encS = (Date.now() - t1) / 1000;

  // Decode the reference ids with moeserve.
  const decIn = cases.map((c) => c.want.join(" ")).join("\n") + "\n";
  const t2 = Date.now();
  const [decLines, decErr] = outputLines(
    await run(o.bin, ["tokenize", "--tokenizer", o.tok, "--decode", "--jsonl"], decIn, o.timeout),
    "tokenize --decode --jsonl", cases.length);
  const decS = (Date.now() - t2) / 1000;
  if (encErr) console.log(`FAIL ${encErr}`);
  if (decErr) console.log(`FAIL ${decErr}`);
  if (!encErr) console.log(`moeserve tokenize --jsonl: ${encS.toFixed(1)} s; --decode --jsonl: ${decS.toFixed(1)} s`);

  let passed = 0, failed = 0, shown = 0, decShown = 0;
  for (let k = 0; k < cases.length; k++) {
    const c = cases[k], st = stat(c.cat);
    let ok = true;
    if (encErr) { ok = false; st.encFail++; } else {
      const line = encLines[k];
      const got = line === "" ? [] : /^\d+( \d+)*$/.test(line) ? line.split(" ").map(Number) : null;
      const at = got ? firstDiff(c.want, got) : 0;
      if (!got || at >= 0) {
        ok = false;
        st.encFail++;
        if (shown++ < 5) {
          console.log(`MISMATCH case ${c.i} [${c.cat}]${c.corrected ? " (corrected expectation)" : ""}: ${clip(JSON.stringify(c.text))}`);
          if (!got) console.log(`  moeserve printed a malformed line: ${clip(JSON.stringify(line), 300)}`);
          else {
            // Text of the differing id and the next two, for orientation.
            const piece = (ids) => (ids[at] !== undefined && ids.slice(at, at + 3).every((v) => v < ref.N_BPE_TOKENS)
              ? ` (text of ids ${at}..${at + 2}: ${JSON.stringify(enc.decode(ids.slice(at, at + 3)))})` : "");
            console.log(`  first difference at position ${at}: want ${c.want[at] ?? "(end)"}${piece(c.want)}, got ${got[at] ?? "(end)"}${piece(got)}`);
            console.log(`  want ${showIds(c.want, at)}`);
            console.log(`  got  ${showIds(got, at)}`);
          }
        }
      }
    }
    if (decErr) { ok = false; st.decFail++; } else {
      let back = null;
      try { back = JSON.parse(decLines[k]); } catch { /* reported below */ }
      if (back !== c.text) {
        ok = false;
        st.decFail++;
        if (decShown++ < 5) {
          console.log(`DECODE MISMATCH case ${c.i} [${c.cat}]: ids ${showIds(c.want, 0)}`);
          console.log(`  want ${clip(JSON.stringify(c.text))}`);
          console.log(`  got  ${clip(typeof back === "string" ? JSON.stringify(back) : "unparsable line " + JSON.stringify(decLines[k]))}`);
        }
      }
    }
    if (ok) passed++; else failed++;
  }
  if (shown > 5) console.log(`... ${shown - 5} more encode mismatches`);
  if (decShown > 5) console.log(`... ${decShown - 5} more decode mismatches`);

  console.log("category            cases compared corrected excluded enc-fail dec-fail");
  for (const [cat, s] of [...stats].sort((a, b) => a[0].localeCompare(b[0])))
    console.log(`${cat.padEnd(18)} ${String(s.cases).padStart(6)} ${String(s.compared).padStart(8)} ${String(s.corrected).padStart(9)} ` +
      `${String(s.skipped).padStart(8)} ${String(s.encFail).padStart(8)} ${String(s.decFail).padStart(8)}`);
  const tot = [...stats.values()].reduce((a, s) => ({ c: a.c + s.compared, k: a.k + s.skipped, r: a.r + s.corrected }), { c: 0, k: 0, r: 0 });
  console.log(`cases: ${o.n} generated (seed ${o.seed}), ${tot.c} compared (${tot.r} with corrected expectation), ${tot.k} excluded (code points of another Unicode version)`);
  console.log(`tokenizer-npm: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

await main();
