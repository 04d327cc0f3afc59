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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deploy", default=os.path.join(HERE, "..", "..", "deploy"))
    ap.add_argument("--dockerfile", default=os.path.join(HERE, "..", "..", "Dockerfile"))
    a = ap.parse_args()

    check(os.path.isfile(os.path.join(a.deploy, "README.md")), "deploy/README.md exists")
    docs = load_docs(a.deploy)
    df_user, df_ports = dockerfile_facts(a.dockerfile)
    check(df_user is not None and df_user.isdigit() and df_user != "0",
          f"Dockerfile: a numeric non-root USER ({df_user})")
    check_dockerfile_backends(a.dockerfile)

    files = sorted({f for f, _ in docs})
    for f in files:
        kinds = [d["kind"] for g, d in docs if g == f]
        check("Deployment" in kinds and "Service" in kinds, f"{f}: kinds include Deployment and Service: {kinds}")
    known = {"Deployment", "Service", "PersistentVolumeClaim", "PersistentVolume", "Secret",
             "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Namespace"}
    kinds = [d["kind"] for _, d in docs]
    check(set(kinds) <= known, f"no unexpected kinds: {sorted(set(kinds) - known)}")
    # the examples can be applied side by side: one namespace, no clashes
    seen = {}
    for f, d in docs:
        key = (d["kind"], d["metadata"]["name"])
        seen.setdefault(key, []).append(f)
    dup = {f"{k}/{n}": fs for (k, n), fs in seen.items() if len(fs) > 1}
    check(not dup, f"no two objects of one kind share a name across deploy/: {dup}")

    pods = []   # (file, Deployment name, pod labels, container)
    for f, d in docs:
        if d["kind"] == "Deployment":
            labels, c = check_deployment(f, d, df_user, df_ports)
            pods.append((f, d["metadata"]["name"], labels, c))
    gpu = [(f, n) for f, n, _, c in pods
           if c and GPU in (((c.get("resources") or {}).get("limits")) or {})]
    check(any(f == "kubernetes-rocm.yaml" for f, _ in gpu),
          f"kubernetes-rocm.yaml has a Deployment on {GPU}: {gpu}")

    def picks(sel, labels):
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())
    for f, d in docs:
        if d["kind"] != "Deployment":
            continue
        sel = (d.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        other = [f"{g}: {n}" for g, n, labels, _ in pods
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

    for f, d in docs:
        if d["kind"] != "Service":
            continue
        name = d["metadata"]["name"]
        spec = d.get("spec") or {}
        check(spec.get("type", "ClusterIP") == "ClusterIP", f"Service {name}: ClusterIP ({spec.get('type')})")
        sel = spec.get("selector") or {}
        mine = [(n, c) for g, n, labels, c in pods if g == f and c and picks(sel, labels)]
        others = [n for g, n, labels, _ in pods if g != f and picks(sel, labels)]
        check(bool(mine), f"{f}: Service {name}: selector {sel} picks its file's Deployment's pods")
        # a CPU and a GPU pod behind one Service would answer at very different speeds
        check(not others, f"{f}: Service {name}: selector picks no other file's pods: {others}")
        match = [c for _, c in mine]
        for p in spec.get("ports") or []:
            tp = p.get("targetPort", p.get("port"))
            ok = any(port_matches(tp, c) for c in match)
            check(ok, f"Service {name}: port {p.get('port')} -> targetPort {tp!r} is the container port")
        check(any(p.get("port") == 80 for p in spec.get("ports") or []), f"Service {name}: serves port 80")

    print(f"deploy-check: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
