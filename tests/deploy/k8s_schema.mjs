// tests/deploy/k8s_schema.mjs: validate every document of every deploy/*.yaml
// against its API schema, offline, with pinned packages
// (tests/deploy/npm-k8s/package-lock.json):
//
//   tools/npm-ci.sh tests/deploy/npm-k8s -- node tests/deploy/k8s_schema.mjs [--deploy DIR]
//
// Kinds of Kubernetes itself: kubernetes-models (the API's OpenAPI schemas
// compiled to validators); ServiceMonitor: @kubernetes-models/prometheus-operator;
// Gateway, HTTPRoute: @kubernetes-models/gateway-api; InferencePool (no npm
// package): tests/deploy/schemas/inferencepool-v1.schema.json with ajv. Each
// document goes through its model class's validate(). Those validators check
// types, enums, patterns and required fields but let unknown fields through
// (the Kubernetes schemas leave additionalProperties open; the API server
// prunes or, with kubectl --validate=strict, rejects them), so a second pass
// runs the same validate() on a Proxy of the document and records which keys
// the validator looks up: a key it never looks up is no property of the
// schema and fails as an unknown field (objects whose keys the validator
// enumerates are maps: labels, limits, ConfigMap data). A kind without a
// schema fails. YAML is read as YAML 1.1, as kubectl reads it (`yes` is a
// boolean); a duplicate key fails.
//
// Then a self-test: mutated copies of the documents (an unknown field, a
// string for an integer, a missing required field, ...) must each fail,
// for the expected field.
//
// Prints one line per document ("FILE: KIND NAME: OK" or "... FAIL: why"),
// one per self-test case, and a summary. Exit 0 when all pass, 1 on any
// failure, 77 (skip) when the npm packages are not installed (no npm).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgDir = path.join(here, "npm-k8s");
const modules = path.join(pkgDir, "node_modules");

// The package (under node_modules) that holds each API group's models.
const GROUP_PACKAGES = {
  "": "kubernetes-models",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
  "gateway.networking.k8s.io": "@kubernetes-models/gateway-api",
};
// Kinds without a package: a JSON Schema of ours, validated with ajv.
const JSON_SCHEMAS = {
  "inference.networking.k8s.io/v1 InferencePool": "inferencepool-v1.schema.json",
};

function parseArgs(argv) {
  const a = { deploy: path.join(here, "..", "..", "deploy"), schemas: path.join(here, "schemas") };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if ((k === "--deploy" || k === "--schemas") && i + 1 < argv.length) a[k.slice(2)] = argv[++i];
    else throw new Error(`unknown argument ${k} (usage: k8s_schema.mjs [--deploy DIR] [--schemas DIR])`);
  }
  return a;
}

function importFile(rel) {
  return import(pathToFileURL(path.join(modules, rel)).href);
}

// ---- the pinned packages: 77 when not installed at all ----

function checkInstalled() {
  const want = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")).dependencies;
  if (!fs.existsSync(modules)) {
    console.log(`deploy-schema: SKIP: ${modules} is missing (npm unavailable?): ` +
                "run tools/npm-ci.sh tests/deploy/npm-k8s");
    process.exit(77);
  }
  const wrong = [];
  for (const [name, version] of Object.entries(want)) {
    let have = null;
    try {
      have = JSON.parse(fs.readFileSync(path.join(modules, name, "package.json"), "utf8")).version;
    } catch { /* not installed */ }
    if (have !== version) wrong.push(`${name} ${have ?? "missing"} (want ${version})`);
  }
  return wrong;
}

// ---- which validator a document gets ----

// A validator: (doc) => list of error strings, from validate() and the
// unknown-field pass. null when the kind has no schema here.
const validators = new Map();

async function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const pkg = GROUP_PACKAGES[group] ?? (group.endsWith(".k8s.io") || !group.includes(".") ? "kubernetes-models" : null);
  if (!pkg || !/^v\d+((alpha|beta)\d+)?$/.test(version)) return null;
  const dir = pkg === "kubernetes-models" && group === "" ? version : `${group}/${version}`;
  let mod;
  try {
    mod = await importFile(`${pkg}/${dir}/index.js`);
  } catch (e) {
    if (e.code === "ERR_MODULE_NOT_FOUND") return null;
    throw e;
  }
  const cls = mod[kind];
  // a top-level resource of exactly this apiVersion, not a nested type's class
  return cls && cls.kind === kind && cls.apiVersion === apiVersion ? cls : null;
}

async function objectMetaClass() {
  return (await importFile("@kubernetes-models/apimachinery/apis/meta/v1/index.js")).ObjectMeta;
}

function modelErrors(cls, value) {
  try {
    cls.prototype.validate.call(value);
    return [];
  } catch (e) {
    return (e.errors ?? [{ instancePath: "", message: e.message }])
      .map((x) => `${x.instancePath || "/"} ${x.message}`);
  }
}

async function validatorFor(apiVersion, kind, schemasDir) {
  const key = `${apiVersion} ${kind}`;
  if (validators.has(key)) return validators.get(key);
  let v = null;
  const cls = await modelClass(apiVersion, kind);
  if (cls) {
    v = (doc) => [...modelErrors(cls, doc), ...unknownFields((d) => modelErrors(cls, d), doc)];
  } else if (JSON_SCHEMAS[key]) {
    v = await ajvValidator(path.join(schemasDir, JSON_SCHEMAS[key]));
  }
  validators.set(key, v);
  return v;
}

let Ajv = null;
async function ajvValidator(file) {
  Ajv ??= (await importFile("ajv/dist/ajv.js")).default;
  // strict, but `then: {required: [port]}` names a property defined beside it
  const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false });
  // Kubernetes' schema extensions carry no constraint for a single document
  ajv.addVocabulary(["x-kubernetes-list-type", "x-kubernetes-list-map-keys"]);
  ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  const validate = ajv.compile(JSON.parse(fs.readFileSync(file, "utf8")));
  const errors = (d) => (validate(d) ? [] : validate.errors.map((x) => `${x.instancePath || "/"} ${x.message}`));
  const ObjectMeta = await objectMetaClass();
  return (doc) => {
    // metadata is `type: object` in the CRD: check it as ObjectMeta instead
    const out = [...errors(doc), ...unknownFields(errors, doc, ["/metadata"])];
    if (doc && typeof doc.metadata === "object" && doc.metadata !== null) {
      const m = (d) => modelErrors(ObjectMeta, d);
      out.push(...[...m(doc.metadata), ...unknownFields(m, doc.metadata)]
        .map((e) => `/metadata${e.startsWith("/") ? "" : "/"}${e}`));
    }
    return out;
  };
}

// ---- unknown fields: which keys does the validator look up? ----

// Runs check(proxy) on a Proxy of value that records, for every object it
// reaches, the keys read and whether its keys were enumerated; returns
// "PATH unknown field" for each key of a non-enumerated object that was
// never read. Paths under skip (JSON pointers) are not reported.
function unknownFields(check, value, skip = []) {
  const nodes = [];
  check(track(value, "", nodes));
  const out = [];
  for (const n of nodes) {
    if (n.array || n.enumerated || skip.some((s) => n.path === s || n.path.startsWith(`${s}/`))) continue;
    for (const k of Object.keys(n.value)) {
      if (!n.read.has(k)) out.push(`${n.path}/${k} unknown field (not in the schema)`);
    }
  }
  return out;
}

function track(value, ptr, nodes) {
  if (value === null || typeof value !== "object") return value;
  const node = { path: ptr, value, read: new Set(), enumerated: false, array: Array.isArray(value) };
  nodes.push(node);
  const children = new Map();
  const own = (t, k) => Object.prototype.hasOwnProperty.call(t, k);
  return new Proxy(value, {
    get(t, k, r) {
      const v = Reflect.get(t, k, r);
      if (typeof k !== "string" || !own(t, k)) return v;
      node.read.add(k);
      if (!children.has(k)) children.set(k, track(v, `${ptr}/${k}`, nodes));
      return children.get(k);
    },
    has(t, k) {
      if (typeof k === "string") node.read.add(k);
      return Reflect.has(t, k);
    },
    ownKeys(t) {
      node.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

// ---- the documents ----

async function loadDocs(deployDir) {
  const YAML = await importFile("yaml/dist/index.js");
  const files = fs.readdirSync(deployDir).filter((f) => /\.ya?ml$/.test(f)).sort();
  const docs = []; // {file, index, doc} or {file, index, error}
  for (const f of files) {
    const text = fs.readFileSync(path.join(deployDir, f), "utf8");
    YAML.parseAllDocuments(text, { version: "1.1", uniqueKeys: true }).forEach((d, i) => {
      if (d.errors.length) docs.push({ file: f, index: i, error: d.errors.map((e) => e.message).join("; ") });
      else if (d.contents !== null) docs.push({ file: f, index: i, doc: d.toJS() });
    });
  }
  return { files, docs };
}

function describe(d) {
  const meta = d && typeof d === "object" ? d.metadata ?? {} : {};
  return `${d?.kind ?? "?"} ${meta.name ?? "?"}`;
}

async function validateDoc(doc, schemasDir) {
  if (!doc || typeof doc !== "object" || typeof doc.apiVersion !== "string" || typeof doc.kind !== "string") {
    return ["not a Kubernetes object (no apiVersion and kind)"];
  }
  const v = await validatorFor(doc.apiVersion, doc.kind, schemasDir);
  if (!v) return [`no schema for ${doc.apiVersion} ${doc.kind} (add its package or a JSON Schema)`];
  return v(doc);
}

// ---- the self-test: mutations that must fail, at the expected field ----

function find(docs, kind, name) {
  const d = docs.find((x) => x.doc?.kind === kind && (!name || x.doc.metadata?.name === name));
  if (!d) throw new Error(`self-test: no ${kind} ${name ?? ""} in deploy/`);
  return structuredClone(d.doc);
}

const SELF_TESTS = [
  ["an unknown field in a container", "Deployment", "moeserve", "/spec/template/spec/containers/0/imagePullPolicyy",
    (d) => { d.spec.template.spec.containers[0].imagePullPolicyy = "Always"; }],
  ["terminationGracePeriodSeconds as a string", "Deployment", "moeserve",
    "/spec/template/spec/terminationGracePeriodSeconds",
    (d) => { d.spec.template.spec.terminationGracePeriodSeconds = "45"; }],
  ["a misspelt metadata field", "Service", "moeserve", "/metadata/lables",
    (d) => { d.metadata.lables = d.metadata.labels; }],
  ["an HPA without scaleTargetRef", "HorizontalPodAutoscaler", null, "scaleTargetRef",
    (d) => { delete d.spec.scaleTargetRef; }],
  ["an unknown field in a ServiceMonitor endpoint", "ServiceMonitor", null, "/spec/endpoints/0/intervall",
    (d) => { d.spec.endpoints[0].intervall = "5s"; }],
  ["an HTTPRoute backendRef port as a string", "HTTPRoute", null, "/spec/rules/0/backendRefs/0/port",
    (d) => { d.spec.rules[0].backendRefs[0].port = "8080"; }],
  ["an InferencePool targetPorts number as a string", "InferencePool", null, "/spec/targetPorts/0/number",
    (d) => { d.spec.targetPorts[0].number = "8080"; }],
  ["an InferencePool endpointPickerRef without its Service port", "InferencePool", null, "port",
    (d) => { delete d.spec.endpointPickerRef.port; }],
  ["an unknown field in an InferencePool", "InferencePool", null, "/spec/endpointPickerRef/portNumber",
    (d) => { d.spec.endpointPickerRef.portNumber = 9002; }],
  ["a kind with no schema", "ConfigMap", null, "no schema",
    (d) => { d.apiVersion = "example.com/v1"; d.kind = "Widget"; }],
];

async function selfTest(docs, schemasDir) {
  let failed = 0;
  for (const [what, kind, name, expect, mutate] of SELF_TESTS) {
    const d = find(docs, kind, name);
    mutate(d);
    const errs = await validateDoc(d, schemasDir);
    const hit = errs.find((e) => e.includes(expect));
    if (hit) {
      console.log(`self-test: ${what}: rejected OK (${hit})`);
    } else {
      failed++;
      console.log(`self-test: ${what}: FAIL: ${errs.length ? `not at ${expect}: ${errs.join("; ")}` : "accepted"}`);
    }
  }
  return failed;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const wrong = checkInstalled();
  if (wrong.length) {
    console.log(`deploy-schema: FAIL: ${wrong.join(", ")} in ${modules}: run tools/npm-ci.sh tests/deploy/npm-k8s`);
    return 1;
  }
  const { files, docs } = await loadDocs(args.deploy);
  if (!files.length) console.log(`deploy-schema: FAIL: no YAML files in ${args.deploy}`);
  let failed = 0;
  for (const { file, index, doc, error } of docs) {
    const errs = error ? [`YAML: ${error}`] : await validateDoc(doc, args.schemas);
    const what = error ? `document ${index + 1}` : describe(doc);
    if (errs.length) failed++;
    console.log(`${file}: ${what}: ${errs.length ? `FAIL: ${errs.join("; ")}` : "OK"}`);
  }
  const good = docs.filter((d) => d.doc);
  const selfFailed = await selfTest(good, args.schemas);
  console.log(`deploy-schema: ${docs.length - failed} of ${docs.length} documents in ${files.length} files OK; ` +
              `self-test ${SELF_TESTS.length - selfFailed} of ${SELF_TESTS.length} mutations rejected`);
  return failed || selfFailed || !files.length ? 1 : 0;
}

main().then((rc) => { process.exitCode = rc; }, (e) => {
  console.log(`deploy-schema: FAIL: ${e.stack ?? e}`);
  process.exitCode = 1;
});
