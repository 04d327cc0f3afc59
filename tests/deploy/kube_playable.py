#!/usr/bin/env python3
"""tests/deploy/kube_playable.py: a copy of deploy/kubernetes.yaml that
`podman kube play` can run on one machine, for tests/deploy/container.sh.

    kube_playable.py --yaml deploy/kubernetes.yaml --image IMG --model DIR \
        --port N --threads N --name NAME --out FILE

Only what a local podman needs changes (each below says why): the image,
the model volume (a read-only hostPath in place of the claim, which is
dropped), a hostPort for the http port, MOESERVE_THREADS and the CPU and
memory requests/limits, one replica, the Deployment's name. Everything else
(probes, securityContext, the /tmp emptyDir, lifecycle.preStop,
terminationGracePeriodSeconds, the other env, the Service and the
PodDisruptionBudget) is played as the example has it.
Prints one line per change. Exit 1 (with the reason) when the example no
longer has the shape this expects: the test then fails, it does not skip.
"""
import argparse
import sys

import yaml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--yaml", required=True, help="deploy/kubernetes.yaml")
    ap.add_argument("--image", required=True, help="the locally built image")
    ap.add_argument("--model", required=True, help="checkpoint folder on the host")
    ap.add_argument("--port", type=int, required=True, help="a free host port for the http port")
    ap.add_argument("--threads", default="2", help="MOESERVE_THREADS and the CPU request/limit")
    ap.add_argument("--memory-request", default="256Mi")
    ap.add_argument("--memory-limit", default="1Gi")
    ap.add_argument("--name", required=True, help="the Deployment's name in the copy")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    with open(a.yaml) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = [d.get("kind") for d in docs]
    deps = [d for d in docs if d.get("kind") == "Deployment"]
    if len(deps) != 1:
        sys.exit(f"kube_playable: want one Deployment in {a.yaml}, found kinds {kinds}")
    dep = deps[0]
    said = []

    def say(what):
        said.append(what)

    out = []
    for d in docs:
        if d.get("kind") == "PersistentVolumeClaim":
            # The claim only names storage a cluster provides; the model comes
            # from a hostPath below instead. podman would make it a named
            # volume (moeserve-models) of this machine that `podman kube down`
            # (4.3) leaves behind.
            say(f"dropped PersistentVolumeClaim {d['metadata']['name']} (the model is a hostPath)")
            continue
        # Service and PodDisruptionBudget stay: podman kube play ignores
        # kinds it does not play (container.sh checks that it does).
        out.append(d)

    # A name of this run's own: its pod (<name>-pod-0) and container cannot
    # meet another run's, and the cleanup removes only what this run played.
    say(f"Deployment {dep['metadata']['name']} renamed {a.name}")
    dep["metadata"]["name"] = a.name
    spec = dep["spec"]
    # One pod: podman 4.3 plays `replicas` pods (<name>-pod-0, -1, ...), and
    # a second one could not publish the same host port.
    say(f"replicas {spec.get('replicas')} -> 1")
    spec["replicas"] = 1
    tmpl = spec["template"]
    pod = tmpl["spec"]
    ctrs = pod["containers"]
    if len(ctrs) != 1:
        sys.exit(f"kube_playable: want one container, found {[c.get('name') for c in ctrs]}")
    c = ctrs[0]

    # The image: built here, never pulled (no registry); with
    # imagePullPolicy IfNotPresent (kept) podman uses the local one.
    say(f"image {c['image']} -> {a.image}")
    c["image"] = a.image

    # The port: podman 4.3 publishes every containerPort on the host (hostPort
    # = containerPort when unset), so neither hostNetwork nor `--network
    # host` plays this pod ("PortMappings can only be used with Bridge or
    # slirp4netns networking"): it runs on kube play's own bridge network,
    # with the http port published on a free host port (8080 may be taken).
    # MOESERVE_PORT, the containerPort the probes name and the scrape
    # annotation stay 8080 in the pod's network namespace.
    ports = [p for p in c.get("ports", []) if p.get("name") == "http"]
    if len(ports) != 1:
        sys.exit("kube_playable: the container has no port named http")
    say(f"port http: containerPort {ports[0].get('containerPort')}, hostPort {a.port}")
    ports[0]["hostPort"] = a.port
    env = {e["name"]: e for e in c.get("env", [])}
    if "MOESERVE_THREADS" not in env:
        sys.exit("kube_playable: the container sets no MOESERVE_THREADS")

    # Threads and resources: a 2-core machine and a small checkpoint (the
    # server peaks near 25 MB on container.sh's), not gpt-oss-20b on 8 cores.
    # Requests and limits are lowered, not dropped, so podman's mapping of
    # them (CPU quota, memory limit and reservation) is played too.
    say(f"MOESERVE_THREADS {env['MOESERVE_THREADS'].get('value')} -> {a.threads}")
    env["MOESERVE_THREADS"]["value"] = str(a.threads)
    res = c.get("resources", {})
    say(f"resources {res} -> cpu {a.threads}, memory {a.memory_request}/{a.memory_limit}")
    c["resources"] = {
        "requests": {"cpu": str(a.threads), "memory": a.memory_request},
        "limits": {"cpu": str(a.threads), "memory": a.memory_limit},
    }

    # The model: the test checkpoint from a hostPath (the alternative the
    # example comments) in place of the claim; the mount stays readOnly.
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    if "models" not in vols:
        sys.exit("kube_playable: no volume named models")
    say(f"volume models: {sorted(k for k in vols['models'] if k != 'name')} -> hostPath {a.model}")
    vols["models"].clear()
    vols["models"].update({"name": "models", "hostPath": {"path": a.model, "type": "Directory"}})

    with open(a.out, "w") as f:
        yaml.safe_dump_all(out, f, sort_keys=False)
    for s in said:
        print(s)


if __name__ == "__main__":
    main()
