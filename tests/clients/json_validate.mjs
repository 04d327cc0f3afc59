// tests/clients/json_validate.mjs: check texts from constrained JSON decoding against
// their JSON Schemas with ajv + ajv-formats (pinned in
// tests/clients/npm-ajv/package-lock.json).
//
//   tools/npm-ci.sh tests/clients/npm-ajv -- node tests/clients/json_validate.mjs < REQUESTS
//
// Standard input: one request a line (blank lines are skipped),
//   {"schema": <a JSON Schema, or null>, "text": "<a string>", "kind": "schema"|"object"}
// Standard output: one answer a line, in order,
//   {"ok": true}  or  {"ok": false, "error": "<why>"}
// ok when `text` parses with JSON.parse and
//   kind "object": the value is a plain object (not an array, not null);
//   kind "schema": the value validates against `schema` (draft 2020-12 when the
//     schema's $schema names 2020-12 or it uses prefixItems anywhere, else
//     draft-07), ajv {strict: false, allErrors: false} with every ajv-formats
//     format in its default ("full") mode. A schema that does not compile
//     answers ok false with ajv's error. Each distinct schema is compiled once.
//
// Exit status: 0 once every line is answered; 2 when the input cannot be read
// (a line that is not a request as above; nothing after it is answered) or
// ajv is not installed at its pinned version.
//
// ajv comes from tests/clients/npm-ajv/node_modules, found from this file's own path,
// so the script runs from any directory; tools/npm-ci.sh installs it there.
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const ajvDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "npm-ajv");

function fail(msg) {
  process.stderr.write(`json_validate: ${msg}\n`);
  process.exitCode = 2;
}

// ---- ajv, pinned ----

function loadAjv() {
  const want = JSON.parse(fs.readFileSync(path.join(ajvDir, "package.json"), "utf8")).dependencies;
  const require = createRequire(path.join(ajvDir, "package.json"));
  for (const name of ["ajv", "ajv-formats"]) {
    let have = null;
    try {
      have = JSON.parse(fs.readFileSync(path.join(ajvDir, "node_modules", name, "package.json"), "utf8")).version;
    } catch { /* not installed */ }
    if (have !== want[name]) {
      fail(`${name} ${have ?? "missing"} in ${ajvDir}, want ${want[name]}: run tools/npm-ci.sh tests/clients/npm-ajv first`);
      return null;
    }
  }
  const dflt = (m) => m.default ?? m;
  return {
    Ajv: dflt(require("ajv")),
    Ajv2020: dflt(require("ajv/dist/2020")),
    addFormats: dflt(require("ajv-formats")),
  };
}

// ---- schemas ----

function usesPrefixItems(s) {
  if (Array.isArray(s)) return s.some(usesPrefixItems);
  if (s === null || typeof s !== "object") return false;
  return Object.entries(s).some(([k, v]) => k === "prefixItems" || usesPrefixItems(v));
}

function is2020(schema) {
  if (schema === null || typeof schema !== "object") return false;
  return (typeof schema.$schema === "string" && schema.$schema.includes("2020-12")) || usesPrefixItems(schema);
}

// A fresh ajv instance for each distinct schema: two schemas with the same
// $id would otherwise collide in one instance.
const compiled = new Map(); // JSON.stringify(schema) -> {validate} | {error}

function compile(lib, schema) {
  const key = JSON.stringify(schema);
  let c = compiled.get(key);
  if (c) return c;
  try {
    const Cls = is2020(schema) ? lib.Ajv2020 : lib.Ajv;
    const ajv = new Cls({ strict: false, allErrors: false });
    lib.addFormats(ajv);
    const validate = ajv.compile(schema);
    c = { validate, ajv };
  } catch (e) {
    c = { error: `schema does not compile: ${e.message}` };
  }
  compiled.set(key, c);
  return c;
}

// ---- requests ----

function check(lib, req) {
  let value;
  try {
    value = JSON.parse(req.text);
  } catch (e) {
    return { ok: false, error: `JSON.parse: ${e.message}` };
  }
  if (req.kind === "object") {
    if (value === null || typeof value !== "object" || Array.isArray(value))
      return { ok: false, error: `not a JSON object: ${value === null ? "null" : Array.isArray(value) ? "an array" : typeof value}` };
    return { ok: true };
  }
  const c = compile(lib, req.schema);
  if (c.error) return { ok: false, error: c.error };
  if (c.validate(value)) return { ok: true };
  const e = c.validate.errors?.[0];
  let why = c.ajv.errorsText(c.validate.errors);
  if (e?.params && Object.keys(e.params).length) why += ` ${JSON.stringify(e.params)}`;
  return { ok: false, error: why };
}

function parseRequest(line) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    return `not JSON (${e.message})`;
  }
  if (req === null || typeof req !== "object" || Array.isArray(req)) return "not a JSON object";
  if (typeof req.text !== "string") return `"text" is not a string`;
  if (req.kind !== "schema" && req.kind !== "object") return `"kind" is not "schema" or "object"`;
  if (req.kind === "schema" && typeof req.schema !== "boolean" && (req.schema === null || typeof req.schema !== "object" || Array.isArray(req.schema)))
    return `kind "schema" needs "schema" to be an object or a boolean`;
  return req;
}

// Node's stdin stream just ends on a directory; say so instead.
function stdinReadable() {
  try {
    if (!fs.fstatSync(0).isDirectory()) return true;
    fail("cannot read standard input: it is a directory");
  } catch (e) {
    fail(`cannot read standard input: ${e.message}`);
  }
  return false;
}

const lib = stdinReadable() ? loadAjv() : null;
if (lib) {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let lineNo = 0;
  let stopped = false;
  process.stdin.on("error", (e) => {
    fail(`cannot read standard input: ${e.message}`);
    stopped = true;
    rl.close();
  });
  rl.on("line", (line) => {
    lineNo++;
    if (stopped || line.trim() === "") return;
    const req = parseRequest(line);
    if (typeof req === "string") {
      fail(`line ${lineNo}: ${req}`);
      stopped = true;
      rl.close();
      process.stdin.destroy();
      return;
    }
    process.stdout.write(JSON.stringify(check(lib, req)) + "\n");
  });
}
