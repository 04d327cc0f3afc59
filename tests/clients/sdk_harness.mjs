// sdk_harness.mjs: what openai_sdk.mjs and anthropic_sdk.mjs share: their
// command line (--base-url, or --moeserve with a daemon of their own), the
// pinned SDK from their own npm folder, that daemon (a free loopback port,
// ready on /health, stopped with SIGTERM) and the one line per case with the
// summary line after them.

import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

export function assert(cond, what) {
  if (!cond) throw new Error(what);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the command line ----

// SCRIPT: the file's name, for the messages. -> { args, timeoutS }; exits 2 on
// usage errors.
export function parseArgs(script) {
  const usage = (msg) => {
    console.error(`${script}: ${msg}`);
    console.error(`usage: node tests/clients/${script} --base-url URL --model NAME [--api-key KEY]`);
    console.error(`       node tests/clients/${script} --moeserve BIN --model-dir DIR [--timeout S]`);
    process.exit(2);
  };
  const args = {};
  for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (!a.startsWith("--")) usage(`unexpected argument ${a}`);
    const eq = a.indexOf("=");
    if (eq > 0) args[a.slice(2, eq)] = a.slice(eq + 1);
    else if (i + 1 < process.argv.length) args[a.slice(2)] = process.argv[++i];
    else usage(`${a} needs a value`);
  }
  for (const k of Object.keys(args))
    if (!["base-url", "model", "api-key", "moeserve", "model-dir", "timeout"].includes(k)) usage(`unknown option --${k}`);
  if (!args["base-url"] === !args.moeserve) usage("give --base-url or --moeserve (one of them)");
  if (args["base-url"] && !args.model) usage("--base-url needs --model");
  if (args.moeserve && !args["model-dir"]) usage("--moeserve needs --model-dir");
  return { args, timeoutS: Number(args.timeout ?? 120) };
}

// ---- the SDK, pinned ----

// PKG at the version that tests/clients/DIR/package.json pins, from that
// folder's node_modules (each SDK has its own folder and lockfile); prints
// "LABEL: PKG VERSION, node V" and returns the module. tools/npm-ci.sh
// installs it (the meson test runs the script through it); run by hand, a
// missing or other version is a failed case, not an install.
export async function importSdk(label, dir, pkg) {
  const sdkDir = path.join(here, dir);
  const want = JSON.parse(fs.readFileSync(path.join(sdkDir, "package.json"), "utf8")).dependencies[pkg];
  let have = null;
  try {
    have = JSON.parse(fs.readFileSync(path.join(sdkDir, "node_modules", pkg, "package.json"), "utf8")).version;
  } catch { /* not installed */ }
  if (have !== want) {
    console.log(`${label}: ${pkg} ${have ?? "missing"} in ${sdkDir}, want ${want}: ` +
                `run tools/npm-ci.sh tests/clients/${dir} first`);
    console.log(`${label}: 0 passed, 1 failed`);
    process.exit(1);
  }
  const sdk = await import(pathToFileURL(path.join(sdkDir, "node_modules", pkg, "index.mjs")).href);
  console.log(`${label}: ${pkg} ${want}, node ${process.version}`);
  return sdk;
}

// ---- a daemon of our own (--moeserve) ----

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// BIN serve with DIR as NAME on a free loopback port, EXTRA (options of the
// script's own) after the common ones, its output in a log under TMPDIR
// (folder PREFIX...). Resolves once /health answers 200 within timeoutS; an
// error thrown on the way carries the daemon as .daemon, for its log and its
// stop.
export async function startDaemon({ bin, dir, name, extra = [], prefix, timeoutS }) {
  const port = await freePort();
  const logPath = path.join(fs.mkdtempSync(path.join(process.env.TMPDIR ?? "/tmp", prefix)), "daemon.log");
  const log = fs.openSync(logPath, "w");
  const child = spawn(bin, ["serve", "--model", dir, "--port", String(port), "--host", "127.0.0.1",
                            "--served-model-name", name, ...extra, "--shutdown-timeout-s", "10"],
                      { stdio: ["ignore", log, log] });
  let exited = null;
  const exitP = new Promise((resolve) => child.on("exit", (code, sig) => { exited = { code, sig }; resolve(exited); }));
  const d = { child, port, logPath, exitP, get exited() { return exited; } };
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    if (exited) throw Object.assign(new Error(`moeserve serve exited early (${JSON.stringify(exited)})`), { daemon: d });
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      const body = await r.text();
      if (r.status === 200) return d;
      if (r.status !== 503) throw new Error(`/health answered ${r.status}: ${body}`);
    } catch (e) {
      if (e.message?.startsWith("/health")) throw Object.assign(e, { daemon: d });
    }
    if (Date.now() > deadline) throw Object.assign(new Error("the daemon did not become ready in time"), { daemon: d });
    await sleep(50);
  }
}

function printLog(d) {
  try {
    const t = fs.readFileSync(d.logPath, "utf8");
    console.log(`--- daemon log (${d.logPath}), last 4000 bytes:\n${t.slice(-4000)}\n---`);
  } catch { /* none */ }
}

// ---- the cases ----

// One line per case: "ok   NAME" (with " (NOTE)" when the case returns a
// string), "skip NAME: WHY" when it returns "skip WHY", "FAIL NAME: ERROR"
// when it throws.
export class Cases {
  constructor(label) {
    this.label = label;
    this.passed = 0;
    this.failed = 0;
    this.skipped = 0;
  }

  async test(name, fn) {
    try {
      const note = await fn();
      if (typeof note === "string" && note.startsWith("skip")) {
        this.skipped++;
        console.log(`skip ${name}: ${note.slice(5)}`);
        return;
      }
      this.passed++;
      console.log(`ok   ${name}${note ? ` (${note})` : ""}`);
    } catch (e) {
      this.fail(name, e?.stack ?? e);
    }
  }

  fail(name, why) {
    this.failed++;
    console.log(`FAIL ${name}: ${why}`);
  }

  // Stops DAEMON (when there is one: a case of its own, exit 0 on SIGTERM;
  // its log when anything failed), prints "LABEL: P passed, F failed[, S
  // skipped]" and exits 1 when a case failed, 0 otherwise.
  async finish(daemon) {
    if (daemon) {
      if (!daemon.exited) daemon.child.kill("SIGTERM");
      // the shutdown timeout is 10 s: a daemon still there long after it is stuck
      const killer = setTimeout(() => daemon.child.kill("SIGKILL"), 30000);
      const ex = await daemon.exitP;
      clearTimeout(killer);
      if (ex.code === 0) {
        this.passed++;
        console.log("ok   the daemon exits 0 on SIGTERM");
      } else {
        this.fail("the daemon exits 0 on SIGTERM", JSON.stringify(ex));
      }
      if (this.failed) printLog(daemon);
    }
    console.log(`${this.label}: ${this.passed} passed, ${this.failed} failed` +
                `${this.skipped ? `, ${this.skipped} skipped` : ""}`);
    process.exit(this.failed ? 1 : 0);
  }
}
