#!/usr/bin/python3
"""tests/deploy/deploy_check.py: static checks of the Kubernetes examples in deploy/.

    /usr/bin/python3 tests/deploy/deploy_check.py [--deploy DIR] [--dockerfile FILE]

Parses every YAML document of every *.yaml / *.yml file in deploy/ (PyYAML,
Debian's python3-yaml) and checks what each example promises: a Deployment
with replicas behind a ClusterIP Service; readiness and startup probes on
/health and liveness on /live, all on the container's port; resource requests
(and limits); the model on a read-only volume mounted read-only at /models,
which MOESERVE_MODEL names; a non-root, read-only-root security context whose
user matches the Dockerfile's numeric USER and whose port matches its EXPOSE;
the Service's selector picking its file's pods (and no other file's) and its
targetPort the container port. Across files: no two objects of one kind share
a name, so the examples can share a namespace.
The GPU example (kubernetes-rocm.yaml, required): one amd.com/gpu per pod in
limits, the rocm image and backend, device 0 (the pod's only GPU), groups for
the device nodes; the Dockerfile builds the rocm variant (ARG BACKEND). A CPU
Deployment neither asks for a GPU nor runs the rocm backend.
What a schema cannot see, across files (kubernetes-monitoring.yaml,
inference-gateway.yaml): the HPA scales a moeserve Deployment on a custom
metric that a prometheus-adapter rule exposes from a gauge the daemon has
(server/http/metrics.h); the ServiceMonitor selects a moeserve Service and
names its port; the InferencePool selects moeserve pods, targets their
container port and names the EPP's Service and port; the EPP runs for that
pool, pinned, on metrics the daemon has, with a ServiceAccount bound to a Role
that can watch pods and InferencePools; the HTTPRoute sends to the pool
through the Gateway. (tests/deploy/k8s_schema.mjs checks each document
against its API schema.)
Prints one line per check and "deploy-check: N passed, M failed"; exit 1 on a failure.
"""
import argparse
import os
import re
import sys

try:
    import yaml
except ImportError:  # the test is registered only where python3-yaml is
    print("deploy-check: FAIL: PyYAML is missing (Debian: apt-get install python3-yaml)")
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}")
    return ok


def load_docs(folder):
    docs = []
    files = sorted(f for f in os.listdir(folder) if f.endswith((".yaml", ".yml")))
    check(bool(files), f"{folder} has YAML files: {files}")
    for f in files:
        path = os.path.join(folder, f)
        try:
            with open(path, encoding="utf-8") as fh:
                ds = [d for d in yaml.safe_load_all(fh) if d is not None]
        except yaml.YAMLError as e:
            check(False, f"{f} parses: {e}")
            continue
        check(bool(ds), f"{f} parses: {len(ds)} documents")
        for d in ds:
            ok = isinstance(d, dict) and d.get("apiVersion") and d.get("kind") and \
                (d.get("metadata") or {}).get("name")
            check(bool(ok), f"{f}: document has apiVersion, kind and metadata.name: "
                  f"{d.get('kind') if isinstance(d, dict) else type(d).__name__}")
            if ok:
                docs.append((f, d))
    return docs


def port_matches(ref, container):
    """A probe's or Service's port (number or name) names one of the container's ports."""
    for p in container.get("ports") or []:
        if ref == p.get("containerPort") or (isinstance(ref, str) and ref == p.get("name")):
            return p.get("containerPort")
    return None


GPU = "amd.com/gpu"  # AMD's device plugin's resource


def dockerfile_text(path):
    try:
        return open(path, encoding="utf-8").read()
    except OSError:
        return ""


def dockerfile_facts(path):
    """The runtime stage's numeric USER and EXPOSEd ports."""
    user, ports = None, set()
    text = dockerfile_text(path)
    if not text:
        return None, set()
    stage = text.split("\nFROM ")[-1]  # the last stage is the runtime
    for line in stage.splitlines():
        m = re.match(r"\s*USER\s+(\S+)", line)
        if m:
            user = m.group(1).split(":")[0]
        m = re.match(r"\s*EXPOSE\s+(.+)", line)
        if m:
            ports |= {int(p.split("/")[0]) for p in m.group(1).split()}
    return user, ports


def check_dockerfile_backends(path):
    """The Dockerfile builds both variants: ARG BACKEND (default cpu), rocm
    installing hipcc and building with -Drocm=enabled, and the runtime stage
    defaulting MOESERVE_BACKEND to the one built."""
    text = dockerfile_text(path)
    code = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    check(re.search(r"^ARG BACKEND=cpu\s*$", code, re.M) is not None,
          "Dockerfile: ARG BACKEND=cpu (the CPU image is the default)")
    check("hipcc" in code and "libamdhip64-dev" in code and "-Drocm=" in code,
          "Dockerfile: BACKEND=rocm installs hipcc and libamdhip64-dev and sets -Drocm")
    runtime = code.split("\nFROM ")[-1]
    check(re.search(r"MOESERVE_BACKEND=\$\{?BACKEND\}?", runtime) is not None,
          "Dockerfile: the runtime stage sets MOESERVE_BACKEND=${BACKEND}")


def container_backend(c, env):
    """The backend the container runs: --backend in args, else MOESERVE_BACKEND,
    else the image's own default (None: not said here)."""
    args = [str(a) for a in c.get("args") or []]
    for i, a in enumerate(args):
        if a == "--backend" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--backend="):
            return a.split("=", 1)[1]
    return env.get("MOESERVE_BACKEND")


def check_gpu(cname, c, env, pod, lim, req):
    """A Deployment on AMD GPUs: one GPU per pod, the rocm image and backend."""
    try:
        n = int(lim.get(GPU))
    except (TypeError, ValueError):
        n = None
    check(n == 1, f"{cname}: limits {GPU}: 1, one daemon per GPU ({lim.get(GPU)!r})")
    if GPU in req:
        check(str(req[GPU]) == str(lim[GPU]),
              f"{cname}: requests {GPU} equals its limit ({req[GPU]!r} vs {lim[GPU]!r})")
    image = c.get("image") or ""
    check(image.rsplit("/", 1)[-1].split(":", 1)[-1].startswith("rocm"),
          f"{cname}: the rocm image (moeserve:rocm): {image}")
    backend = container_backend(c, env)
    check(backend == "rocm", f"{cname}: the rocm backend (--backend or MOESERVE_BACKEND): {backend!r}")
    dev = env.get("MOESERVE_DEVICE")
    check(dev in (None, "0"), f"{cname}: device 0, the pod's only GPU (MOESERVE_DEVICE {dev!r})")
    groups = (pod.get("securityContext") or {}).get("supplementalGroups") or []
    check(bool(groups) and all(isinstance(g, int) and g > 0 for g in groups),
          f"{cname}: supplementalGroups for the GPU's device nodes: {groups}")


def check_deployment(f, d, df_user, df_ports):
    name = d["metadata"]["name"]
    spec = d.get("spec") or {}
    check(isinstance(spec.get("replicas"), int) and spec["replicas"] >= 2,
          f"Deployment {name}: replicas >= 2 ({spec.get('replicas')})")
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    check(bool(sel) and all(labels.get(k) == v for k, v in sel.items()),
          f"Deployment {name}: selector {sel} matches the pod labels")
    pod = tmpl.get("spec") or {}
    containers = pod.get("containers") or []
    c = next((c for c in containers if "moeserve" in (c.get("image") or "")), None)
    if not check(c is not None, f"Deployment {name}: a container runs a moeserve image"):
        return labels, None
    cname = f"{f}: {c.get('name')}"   # container names repeat across files
    ports = [p.get("containerPort") for p in c.get("ports") or []]
    check(bool(ports), f"{cname}: declares its port(s) {ports}")
    env = {e.get("name"): e.get("value") for e in c.get("env") or []}
    port = int(env.get("MOESERVE_PORT") or 8080)
    check(port in ports, f"{cname}: MOESERVE_PORT {port} is a declared containerPort")
    if df_ports:
        check(port in df_ports, f"{cname}: port {port} is the one the Dockerfile EXPOSEs {sorted(df_ports)}")
    check(env.get("MOESERVE_HOST") in (None, "0.0.0.0", "::"),
          f"{cname}: listens on every interface (MOESERVE_HOST {env.get('MOESERVE_HOST')})")

    # probes: the path, and the port being the one the server listens on
    def probe(kind, path):
        p = c.get(kind)
        g = (p or {}).get("httpGet") or {}
        target = port_matches(g.get("port"), c)
        check(p is not None and g.get("path") == path and target == port,
              f"{cname}: {kind} httpGet {g.get('path')} on port {g.get('port')!r} "
              f"(want {path} on {port})")
        return p or {}
    probe("readinessProbe", "/health")
    probe("livenessProbe", "/live")
    sp = probe("startupProbe", "/health")
    budget = (sp.get("periodSeconds") or 10) * (sp.get("failureThreshold") or 3)
    check(budget >= 300, f"{cname}: startupProbe allows a slow model load ({budget} s >= 300 s)")

    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    check("cpu" in req and "memory" in req, f"{cname}: resource requests cpu and memory: {req}")
    check("memory" in lim, f"{cname}: a memory limit: {lim}")
    args = c.get("args")
    check(args is None or (args and args[0] == "serve"), f"{cname}: args run `serve`: {args}")
    if GPU in lim or GPU in req:
        check_gpu(cname, c, env, pod, lim, req)
    else:
        backend = container_backend(c, env)
        check(backend in (None, "cpu"),
              f"{cname}: no GPU asked for, so not the rocm backend (it would exit 69): {backend!r}")

    # the model: a read-only volume at /models, which MOESERVE_MODEL names
    mounts = {m.get("mountPath"): m for m in c.get("volumeMounts") or []}
    m = mounts.get("/models")
    check(m is not None and m.get("readOnly") is True,
          f"{cname}: a volume mounted readOnly at /models ({m})")
    check(env.get("MOESERVE_MODEL") in ("/models", "/models/"),
          f"{cname}: MOESERVE_MODEL is /models ({env.get('MOESERVE_MODEL')})")
    if m:
        vol = next((v for v in pod.get("volumes") or [] if v.get("name") == m.get("name")), None)
        check(vol is not None, f"{cname}: the /models volume {m.get('name')!r} is declared")
        if vol:
            pvc = vol.get("persistentVolumeClaim")
            if pvc is not None:
                check(pvc.get("readOnly") is True, f"volume {vol['name']}: claim {pvc.get('claimName')} readOnly")
            else:
                check("hostPath" in vol or "csi" in vol or "nfs" in vol or "image" in vol,
                      f"volume {vol['name']}: a PVC or another model source: {sorted(vol)}")

    # security: non-root (matching the image's numeric USER), read-only root
    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}
    non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    check(non_root is True, f"{cname}: runAsNonRoot")
    check(uid is None or uid != 0, f"{cname}: runAsUser {uid} is not root")
    if df_user is not None and uid is not None:
        check(str(uid) == df_user, f"{cname}: runAsUser {uid} is the Dockerfile's USER {df_user}")
    check(csc.get("readOnlyRootFilesystem") is True, f"{cname}: readOnlyRootFilesystem")
    check(csc.get("allowPrivilegeEscalation") is False, f"{cname}: allowPrivilegeEscalation false")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    drain = int(env.get("MOESERVE_SHUTDOWN_TIMEOUT_S") or 30)
    cmd = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    pre = int(cmd[1]) if len(cmd) == 2 and cmd[0] == "sleep" and str(cmd[1]).isdigit() else 0
    check(pre > 0, f"{cname}: a preStop sleep lets the endpoints drop the pod before SIGTERM")
    check(grace > pre + drain, f"{cname}: terminationGracePeriodSeconds {grace} > preStop {pre} s + "
          f"the server's drain {drain} s")
    return labels, c


def moeserve_container(d):
    """The container of a Deployment that runs a moeserve image, or None."""
    pod = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
    return next((c for c in pod.get("containers") or [] if "moeserve" in (c.get("image") or "")), None)


def picks(sel, labels):
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def metrics_h_names(path):
    """moeserve's metric names and types, from the table in server/http/metrics.h."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return {}
    return dict(re.findall(r"\|\s*`(moeserve:[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|", text))


def flag_values(args):
    """--name=value and --name value of a container's args, as a dict."""
    out, args = {}, [str(a) for a in args or []]
    for i, a in enumerate(args):
        if not a.startswith("-"):
            continue
        name = a.lstrip("-")
        if "=" in name:
            name, value = name.split("=", 1)
        else:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else None
        out[name] = value
    return out


def adapter_rules(docs):
    """prometheus-adapter rules carried by ConfigMaps (a config.yaml with rules:)."""
    rules = []
    for f, d in docs:
        if d["kind"] != "ConfigMap":
            continue
        for key, text in (d.get("data") or {}).items():
            if not key.endswith((".yaml", ".yml")):
                continue
            try:
                cfg = yaml.safe_load(text)
            except yaml.YAMLError as e:
                check(False, f"{f}: ConfigMap {d['metadata']['name']}: {key} parses: {e}")
                continue
            if isinstance(cfg, dict) and isinstance(cfg.get("rules"), list):
                rules += [(f, d["metadata"]["name"], r) for r in cfg["rules"] if isinstance(r, dict)]
    return rules


def check_adapter_rule(f, cm, rule, metrics):
    """One rule: its series is a moeserve gauge, the API name it gives, pods."""
    q = str(rule.get("seriesQuery") or "")
    m = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", q)
    series = m.group(1) if m else None
    check(series in metrics, f"{f}: adapter rule ({cm}): series {series!r} is a metric of server/http/metrics.h")
    if series in metrics:
        check(metrics[series] == "gauge", f"{f}: adapter rule: {series} is a gauge ({metrics[series]}): "
              "the HPA averages a current value, not a counter")
    name = rule.get("name") or {}
    matches = str(name.get("matches") or ".*")
    check(series is not None and re.search(matches, series) is not None,
          f"{f}: adapter rule: name.matches {matches!r} matches {series!r}")
    api = name.get("as")
    check(isinstance(api, str) and re.fullmatch(r"[a-z0-9_]+", api or "") is not None,
          f"{f}: adapter rule: exposed as {api!r} (plain, no colon)")
    over = (rule.get("resources") or {}).get("overrides") or {}
    res = {str((v or {}).get("resource")) for v in over.values()}
    check({"namespace", "pod"} <= res or {"namespaces", "pods"} <= res,
          f"{f}: adapter rule: associates namespace and pod ({sorted(res)})")
    mq = str(rule.get("metricsQuery") or "")
    check("<<.Series>>" in mq and "<<.LabelMatchers>>" in mq and "<<.GroupBy>>" in mq,
          f"{f}: adapter rule: metricsQuery uses <<.Series>>, <<.LabelMatchers>>, <<.GroupBy>>")
    return api


def check_hpa(f, d, docs, api_names):
    name = d["metadata"]["name"]
    spec = d.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    target = next(((g, e) for g, e in docs if e["kind"] == "Deployment" and
                   e["metadata"]["name"] == ref.get("name")), (None, None))
    check(ref.get("kind") == "Deployment" and ref.get("apiVersion") == "apps/v1" and target[1] is not None
          and moeserve_container(target[1]) is not None,
          f"{f}: HPA {name}: scaleTargetRef {ref.get('kind')}/{ref.get('name')} is a moeserve Deployment "
          f"of deploy/ (in {target[0]})")
    lo, hi = spec.get("minReplicas", 1), spec.get("maxReplicas")
    check(isinstance(lo, int) and lo >= 2 and isinstance(hi, int) and hi > lo,
          f"{f}: HPA {name}: 2 <= minReplicas {lo} < maxReplicas {hi}")
    pods = [m for m in spec.get("metrics") or [] if m.get("type") == "Pods"]
    check(bool(pods), f"{f}: HPA {name}: scales on a Pods metric")
    for m in pods:
        mn = ((m.get("pods") or {}).get("metric") or {}).get("name")
        check(mn in api_names, f"{f}: HPA {name}: metric {mn!r} is one an adapter rule exposes {sorted(api_names)}")
    beh = spec.get("behavior") or {}
    down = (beh.get("scaleDown") or {}).get("stabilizationWindowSeconds", 300)
    up = (beh.get("scaleUp") or {}).get("stabilizationWindowSeconds", 0)
    check(down >= 300, f"{f}: HPA {name}: scale-down waits {down} s >= 300 s (a replica loads for minutes)")
    check(up <= 60, f"{f}: HPA {name}: scale-up waits {up} s <= 60 s")


def check_service_monitor(f, d, services):
    name = d["metadata"]["name"]
    spec = d.get("spec") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    hit = [(g, s) for g, s in services if picks(sel, (s.get("metadata") or {}).get("labels") or {})]
    check(bool(hit), f"{f}: ServiceMonitor {name}: selector {sel} picks a moeserve Service: "
          f"{[s['metadata']['name'] for _, s in hit]}")
    for ep in spec.get("endpoints") or []:
        port = ep.get("port")
        ok = bool(hit) and all(any(p.get("name") == port for p in (s.get("spec") or {}).get("ports") or [])
                               for _, s in hit)
        check(ok, f"{f}: ServiceMonitor {name}: endpoint port {port!r} is a named port of the Service(s)")
        check(ep.get("path", "/metrics") == "/metrics", f"{f}: ServiceMonitor {name}: path {ep.get('path')}")


def check_inference_pool(f, d, docs, deployments, metrics):
    """The pool selects moeserve pods and their port, and names the EPP's
    Service; the EPP serves this pool on moeserve's metrics."""
    name = d["metadata"]["name"]
    spec = d.get("spec") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    mine = [(g, n, c) for g, n, labels, c in deployments if c and picks(sel, labels)]
    check(len(mine) == 1, f"{f}: InferencePool {name}: selector {sel} picks one moeserve Deployment's pods: "
          f"{[f'{g}: {n}' for g, n, _ in mine]}")
    nums = [p.get("number") for p in spec.get("targetPorts") or []]
    for g, n, c in mine:
        ports = [p.get("containerPort") for p in c.get("ports") or []]
        check(bool(nums) and all(x in ports for x in nums),
              f"{f}: InferencePool {name}: targetPorts {nums} are {g}: {n}'s container ports {ports}")
    ref = spec.get("endpointPickerRef") or {}
    svc = next((s for g, s in docs if g == f and s["kind"] == "Service" and s["metadata"]["name"] == ref.get("name")),
               None)
    port = (ref.get("port") or {}).get("number")
    check(svc is not None and ref.get("kind", "Service") == "Service",
          f"{f}: InferencePool {name}: endpointPickerRef names a Service of this file ({ref.get('name')})")
    if svc is None:
        return
    check(any(p.get("port") == port for p in (svc.get("spec") or {}).get("ports") or []),
          f"{f}: InferencePool {name}: endpointPickerRef port {port} is a port of Service {svc['metadata']['name']}")
    ssel = (svc.get("spec") or {}).get("selector") or {}
    epp = [e for g, e in docs if e["kind"] == "Deployment" and g == f and moeserve_container(e) is None
           and picks(ssel, ((e["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {})]
    if check(len(epp) == 1, f"{f}: InferencePool {name}: the EPP Service selects one EPP Deployment"):
        check_epp(f, epp[0], svc, name, docs, metrics)


def check_epp(f, e, svc, pool, docs, metrics):
    """The EPP: pinned, for this pool, on moeserve's gauges, its Service's
    ports, a ServiceAccount bound to a Role that watches pods and pools."""
    pod = (e["spec"].get("template") or {}).get("spec") or {}
    c = (pod.get("containers") or [{}])[0]
    flags = flag_values(c.get("args"))
    image = c.get("image") or ""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    check(re.fullmatch(r"v\d+\.\d+\.\d+", tag) is not None, f"{f}: EPP {e['metadata']['name']}: image pinned "
          f"to a release ({image})")
    check(flags.get("pool-name") == pool, f"{f}: EPP: --pool-name {flags.get('pool-name')!r} is the pool {pool!r}")
    for flag in ("total-queued-requests-metric", "kv-cache-usage-percentage-metric"):
        v = flags.get(flag)
        check(v in metrics and metrics[v] == "gauge",
              f"{f}: EPP: --{flag} {v!r} is a gauge of server/http/metrics.h")
    check("lora-info-metric" in flags and not flags["lora-info-metric"],
          f"{f}: EPP: --lora-info-metric empty (moeserve has no LoRA metric)")
    ports = {p.get("containerPort") for p in c.get("ports") or []}
    for p in (svc.get("spec") or {}).get("ports") or []:
        tp = p.get("targetPort", p.get("port"))
        ok = tp in ports or any(q.get("name") == tp for q in c.get("ports") or [])
        check(ok, f"{f}: Service {svc['metadata']['name']}: port {p.get('port')} -> {tp!r} is an EPP container port")
    sa = pod.get("serviceAccountName")
    bound = set()
    for g, rb in docs:
        if rb["kind"] != "RoleBinding" or g != f:
            continue
        if any(s.get("kind") == "ServiceAccount" and s.get("name") == sa for s in rb.get("subjects") or []):
            role = next((r for h, r in docs if h == f and r["kind"] == rb.get("roleRef", {}).get("kind")
                         and r["metadata"]["name"] == rb.get("roleRef", {}).get("name")), None)
            for rule in (role or {}).get("rules") or []:
                if {"list", "watch"} <= set(rule.get("verbs") or []):
                    bound |= {(grp, r) for grp in rule.get("apiGroups") or [] for r in rule.get("resources") or []}
    check(any(h == f and x["kind"] == "ServiceAccount" and x["metadata"]["name"] == sa for h, x in docs),
          f"{f}: EPP: its ServiceAccount {sa!r} is in this file")
    need = {("", "pods"), ("inference.networking.k8s.io", "inferencepools")}
    check(need <= bound, f"{f}: EPP: {sa!r} may list and watch pods and inferencepools ({sorted(bound)})")


def check_http_route(f, d, docs):
    name = d["metadata"]["name"]
    spec = d.get("spec") or {}
    names = {(e["kind"], e["metadata"]["name"]) for _, e in docs}
    for p in spec.get("parentRefs") or []:
        check(p.get("kind", "Gateway") == "Gateway" and ("Gateway", p.get("name")) in names,
              f"{f}: HTTPRoute {name}: parentRef {p.get('name')!r} is a Gateway of deploy/")
    refs = [b for r in spec.get("rules") or [] for b in r.get("backendRefs") or []]
    check(bool(refs), f"{f}: HTTPRoute {name}: has backendRefs")
    for b in refs:
        if b.get("kind") == "InferencePool":
            check(b.get("group") == "inference.networking.k8s.io" and ("InferencePool", b.get("name")) in names,
                  f"{f}: HTTPRoute {name}: backendRef {b.get('group')}/{b.get('name')} is an InferencePool "
                  "of deploy/")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deploy", default=os.path.join(HERE, "..", "..", "deploy"))
    ap.add_argument("--dockerfile", default=os.path.join(HERE, "..", "..", "Dockerfile"))
    ap.add_argument("--metrics-h", default=os.path.join(HERE, "..", "..", "server", "http", "metrics.h"))
    a = ap.parse_args()

    check(os.path.isfile(os.path.join(a.deploy, "README.md")), "deploy/README.md exists")
    docs = load_docs(a.deploy)
    df_user, df_ports = dockerfile_facts(a.dockerfile)
    check(df_user is not None and df_user.isdigit() and df_user != "0",
          f"Dockerfile: a numeric non-root USER ({df_user})")
    check_dockerfile_backends(a.dockerfile)

    metrics = metrics_h_names(a.metrics_h)
    check(bool(metrics), f"{a.metrics_h}: the table of moeserve: metrics ({len(metrics)})")
    files = sorted({f for f, _ in docs})
    for f in files:
        kinds = [d["kind"] for g, d in docs if g == f]
        if "Deployment" in kinds:   # a workload is reached through its Service
            check("Service" in kinds, f"{f}: kinds include Deployment and Service: {kinds}")
    known = {"Deployment", "Service", "PersistentVolumeClaim", "PersistentVolume", "Secret",
             "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Namespace",
             "ServiceAccount", "Role", "RoleBinding", "ServiceMonitor", "InferencePool",
             "Gateway", "HTTPRoute"}
    kinds = [d["kind"] for _, d in docs]
    check(set(kinds) <= known, f"no unexpected kinds: {sorted(set(kinds) - known)}")
    # the examples can be applied side by side: one namespace, no clashes
    seen = {}
    for f, d in docs:
        key = (d["kind"], d["metadata"]["name"])
        seen.setdefault(key, []).append(f)
    dup = {f"{k}/{n}": fs for (k, n), fs in seen.items() if len(fs) > 1}
    check(not dup, f"no two objects of one kind share a name across deploy/: {dup}")

    pods = []   # (file, Deployment name, pod labels, container): the moeserve Deployments
    helpers = []  # (file, Deployment name, pod labels): the others (the EPP)
    for f, d in docs:
        if d["kind"] == "Deployment" and moeserve_container(d) is not None:
            labels, c = check_deployment(f, d, df_user, df_ports)
            pods.append((f, d["metadata"]["name"], labels, c))
        elif d["kind"] == "Deployment":
            tmpl = (d.get("spec") or {}).get("template") or {}
            helpers.append((f, d["metadata"]["name"], (tmpl.get("metadata") or {}).get("labels") or {}))
    check(any(f == "kubernetes.yaml" for f, *_ in pods), "kubernetes.yaml has a moeserve Deployment")
    gpu = [(f, n) for f, n, _, c in pods
           if c and GPU in (((c.get("resources") or {}).get("limits")) or {})]
    check(any(f == "kubernetes-rocm.yaml" for f, _ in gpu),
          f"kubernetes-rocm.yaml has a Deployment on {GPU}: {gpu}")

    everyone = pods + [(f, n, labels, None) for f, n, labels in helpers]
    for f, d in docs:
        if d["kind"] != "Deployment":
            continue
        sel = (d.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        other = [f"{g}: {n}" for g, n, labels, _ in everyone
                 if (g, n) != (f, d["metadata"]["name"]) and picks(sel, labels)]
        check(not other, f"{f}: Deployment {d['metadata']['name']}: selector {sel} picks no other "
              f"Deployment's pods: {other}")

    claims = {d["metadata"]["name"]: d for _, d in docs if d["kind"] == "PersistentVolumeClaim"}
    for _, d in docs:
        if d["kind"] == "Deployment":
            for v in ((d["spec"].get("template") or {}).get("spec") or {}).get("volumes") or []:
                cn = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if cn and cn in claims:
                    modes = (claims[cn].get("spec") or {}).get("accessModes") or []
                    check("ReadOnlyMany" in modes, f"claim {cn}: ReadOnlyMany for many replicas ({modes})")

    moeserve_services = []
    for f, d in docs:
        if d["kind"] != "Service":
            continue
        name = d["metadata"]["name"]
        spec = d.get("spec") or {}
        check(spec.get("type", "ClusterIP") == "ClusterIP", f"Service {name}: ClusterIP ({spec.get('type')})")
        sel = spec.get("selector") or {}
        mine = [(n, c) for g, n, labels, c in pods if g == f and c and picks(sel, labels)]
        others = [n for g, n, labels, _ in everyone if g != f and picks(sel, labels)]
        if not mine and any(g == f and picks(sel, labels) for g, _, labels in helpers):
            # the EPP's Service: inference-gateway.yaml's checks cover its ports
            check(not others, f"{f}: Service {name}: selector picks no other file's pods: {others}")
            continue
        moeserve_services.append((f, d))
        check(bool(mine), f"{f}: Service {name}: selector {sel} picks its file's Deployment's pods")
        # a CPU and a GPU pod behind one Service would answer at very different speeds
        check(not others, f"{f}: Service {name}: selector picks no other file's pods: {others}")
        match = [c for _, c in mine]
        for p in spec.get("ports") or []:
            tp = p.get("targetPort", p.get("port"))
            ok = any(port_matches(tp, c) for c in match)
            check(ok, f"Service {name}: port {p.get('port')} -> targetPort {tp!r} is the container port")
        check(any(p.get("port") == 80 for p in spec.get("ports") or []), f"Service {name}: serves port 80")

    # across files: monitoring, autoscaling, the inference gateway
    api_names = {check_adapter_rule(f, cm, r, metrics) for f, cm, r in adapter_rules(docs)}
    for f, d in docs:
        kind = d["kind"]
        if kind == "HorizontalPodAutoscaler":
            check_hpa(f, d, docs, api_names)
        elif kind == "ServiceMonitor":
            check_service_monitor(f, d, moeserve_services)
        elif kind == "InferencePool":
            check_inference_pool(f, d, docs, pods, metrics)
        elif kind == "HTTPRoute":
            check_http_route(f, d, docs)

    print(f"deploy-check: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
