#!/usr/bin/python3
"""tests/deploy_check.py: static checks of the Kubernetes example in deploy/.

    /usr/bin/python3 tests/deploy_check.py [--deploy DIR] [--dockerfile FILE]

Parses every YAML document of every *.yaml / *.yml file in deploy/ (PyYAML,
Debian's python3-yaml) and checks what the example promises: a Deployment
with replicas behind a ClusterIP Service; readiness and startup probes on
/health and liveness on /live, all on the container's port; resource requests
(and limits); the model on a read-only volume mounted read-only at /models,
which MOESERVE_MODEL names; a non-root, read-only-root security context whose
user matches the Dockerfile's numeric USER and whose port matches its EXPOSE;
the Service's selector picking the pods and its targetPort the container port.
Prints one line per check and "deploy: N passed, M failed"; exit 1 on a failure.
"""
import argparse
import os
import re
import sys

try:
    import yaml
except ImportError:  # the test is registered only where python3-yaml is
    print("deploy: FAIL: PyYAML is missing (Debian: apt-get install python3-yaml)")
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


def dockerfile_facts(path):
    """The runtime stage's numeric USER and EXPOSEd ports."""
    user, ports = None, set()
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
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
    cname = c.get("name")
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
    check(grace > drain, f"{cname}: terminationGracePeriodSeconds {grace} > the server's drain {drain} s")
    return labels, c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deploy", default=os.path.join(HERE, "..", "deploy"))
    ap.add_argument("--dockerfile", default=os.path.join(HERE, "..", "Dockerfile"))
    a = ap.parse_args()

    check(os.path.isfile(os.path.join(a.deploy, "README.md")), "deploy/README.md exists")
    docs = load_docs(a.deploy)
    df_user, df_ports = dockerfile_facts(a.dockerfile)
    check(df_user is not None and df_user.isdigit() and df_user != "0",
          f"Dockerfile: a numeric non-root USER ({df_user})")

    kinds = [d["kind"] for _, d in docs]
    check("Deployment" in kinds and "Service" in kinds, f"kinds include Deployment and Service: {kinds}")
    known = {"Deployment", "Service", "PersistentVolumeClaim", "PersistentVolume", "Secret",
             "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Namespace"}
    check(set(kinds) <= known, f"no unexpected kinds: {sorted(set(kinds) - known)}")

    pods = []
    for f, d in docs:
        if d["kind"] == "Deployment":
            pods.append(check_deployment(f, d, df_user, df_ports))
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
        match = [c for labels, c in pods if c and sel and all(labels.get(k) == v for k, v in sel.items())]
        check(bool(match), f"Service {name}: selector {sel} picks the Deployment's pods")
        for p in spec.get("ports") or []:
            tp = p.get("targetPort", p.get("port"))
            ok = any(port_matches(tp, c) for c in match)
            check(ok, f"Service {name}: port {p.get('port')} -> targetPort {tp!r} is the container port")
        check(any(p.get("port") == 80 for p in spec.get("ports") or []), f"Service {name}: serves port 80")

    print(f"deploy: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
