#!/usr/bin/env bash
# tests/deploy/container.sh: build the Dockerfile's image, run it on a small checkpoint
# mounted read-only at /models, and check it from the host: /health, /live, one
# completion, the HEALTHCHECK, a non-root user, a graceful stop. Where the
# engine is podman, `podman kube play` of the CPU Kubernetes example
# (deploy/kubernetes.yaml, in a copy kube_playable.py makes playable here) on
# the same image and checkpoint: /health, a completion, /live, uid 10001, a
# read-only root, the probes podman maps, `kube down`. Then the ROCm
# variant (--build-arg BACKEND=rocm): it builds, links the HIP runtime, starts,
# runs the CPU backend, and without a GPU (none here: no /dev/kfd in the
# container) `serve --backend rocm` exits 69 with "no ROCm/HIP device".
#
#   tests/deploy/container.sh [--src DIR] [--python PY] [--image NAME] [--keep-image] [--no-rocm]
#
# The container engine comes from ../shared/tools/container-env.sh (podman with
# the flags this kind of machine needs, and a local debian:bookworm-slim built
# with debootstrap: the first run takes a few minutes). Without that script, a
# working `podman` or `docker` on PATH is used as it is.
# Exit 0: all passed; 1: a check failed; 77 (meson's skip) only when no
# container engine can be had at all, printed as "container: SKIPPED: <reason>".
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$here/../.." && pwd)
PY=/usr/bin/python3
IMAGE=localhost/moeserve:container-test
KEEP_IMAGE=0
ROCM=1
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --image) IMAGE=$2; shift 2 ;;
    --keep-image) KEEP_IMAGE=1; shift ;;
    --no-rocm) ROCM=0; shift ;;
    *) echo "usage: $0 [--src DIR] [--python PY] [--image NAME] [--keep-image] [--no-rocm]" >&2; exit 2 ;;
  esac
done
ROCM_IMAGE=$IMAGE-rocm

skip() { echo "container: SKIPPED: $*"; exit 77; }

# ---- the container engine ----------------------------------------------------
# Looked for beside the checkout, beside the repository a worktree belongs
# to, and beside the checkout it was cloned from when that is a local folder
# (a fresh clone for CI keeps its origin's path): never at a path of one
# machine.
env_script=""
top=$(git -C "$SRC" rev-parse --show-toplevel 2>/dev/null || true)
common=$(git -C "$SRC" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
common=${common:+$(dirname "$common")}
origin=$(git -C "$SRC" config --get remote.origin.url 2>/dev/null || true)
origin=${origin#file://}
case "$origin" in /*) ;; *) origin="" ;; esac
for c in ${MOESERVE_CONTAINER_ENV:-} "${top:+$top/../shared/tools/container-env.sh}" \
         "$SRC/../shared/tools/container-env.sh" \
         "${common:+$common/../shared/tools/container-env.sh}" \
         "${origin:+$origin/../shared/tools/container-env.sh}"; do
  if [ -n "$c" ] && [ -f "$c" ]; then env_script=$c; break; fi
done
engine_note=""
if [ -n "$env_script" ]; then
  echo "container: engine from $env_script"
  # shellcheck disable=SC1090
  if ! . "$env_script"; then
    engine_note="$env_script failed"
    unset PODMAN
  fi
else
  engine_note="no shared/tools/container-env.sh beside the repository"
fi
if [ -z "${PODMAN:-}" ]; then
  # no sandbox helper: a container engine already installed, as it is
  for e in podman docker; do
    if command -v "$e" >/dev/null 2>&1 && "$e" info >/dev/null 2>&1; then
      PODMAN=$e; PODMAN_BUILD_FLAGS=""; PODMAN_RUN_FLAGS=""; break
    fi
  done
fi
[ -n "${PODMAN:-}" ] || skip "no container engine (${engine_note:-none found}; no working podman or docker on PATH)"
$PODMAN info >/dev/null 2>&1 || skip "the container engine does not run here ($PODMAN info fails${engine_note:+; $engine_note})"
case "$PODMAN" in *podman*) is_podman=1 ;; *) is_podman=0 ;; esac
echo "container: engine: $PODMAN"

# From here on every problem is a failure, never a skip.
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
finish() {
  echo "container: $pass passed, $fail failed"
  [ "$fail" -eq 0 ] && exit 0 || exit 1
}

work=$(mktemp -d /tmp/moeserve-container.XXXXXX)
cname="moeserve-test-$$"
# `podman kube play` of deploy/kubernetes.yaml (below): the played copy, the
# Deployment's name in it (this run's own), the pod and container podman
# names after it (<deployment>-pod-<i>, <pod>-<container>), whether a pod may
# be up, and the background `podman wait`/`logs -f` of its stop
kube_yaml="$work/kubernetes-play.yaml"
kname="$cname-kube"
kpod="$kname-pod-0"
kctr="$kpod-moeserve"
kube_played=0
kube_bg=""
cleanup() {
  if [ "$kube_played" = 1 ]; then
    $PODMAN kube down "$kube_yaml" >/dev/null 2>&1 || true
    $PODMAN pod rm -f -t 0 "$kpod" >/dev/null 2>&1 || $PODMAN pod rm -f "$kpod" >/dev/null 2>&1 || true
  fi
  for p in $kube_bg; do kill "$p" 2>/dev/null || true; done
  $PODMAN rm -f -t 0 "$cname" >/dev/null 2>&1 || $PODMAN rm -f "$cname" >/dev/null 2>&1 || true
  if [ "$KEEP_IMAGE" != 1 ]; then
    $PODMAN rmi "$IMAGE" >/dev/null 2>&1 || true
    $PODMAN rmi "$ROCM_IMAGE" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# ---- build ---------------------------------------------------------------------
fmt=""
[ "$is_podman" = 1 ] && fmt="--format docker"   # OCI images drop HEALTHCHECK
# podman schedules HEALTHCHECKs with systemd timers; without systemd, run them by hand
hc_flags=""
[ "$is_podman" = 1 ] && hc_flags="--health-interval=disable"
echo "container: building $IMAGE from $SRC (log: build.log, tail on failure)"
t0=$(date +%s)
# shellcheck disable=SC2086
if $PODMAN build ${PODMAN_BUILD_FLAGS:-} $fmt -t "$IMAGE" -f "$SRC/Dockerfile" "$SRC" >"$work/build.log" 2>&1; then
  ok "image builds ($(( $(date +%s) - t0 )) s)"
else
  tail -40 "$work/build.log"
  bad "image builds"
  finish
fi
size=$($PODMAN image inspect --format '{{.Size}}' "$IMAGE" 2>/dev/null || echo 0)
echo "container: image size $size bytes ($((size / 1000000)) MB)"

# ---- the image's configuration ---------------------------------------------------------
# image_checks IMAGE BACKEND: its configuration, one ok/FAIL line per property
image_checks() {
$PODMAN image inspect "$1" >"$work/image.json" 2>/dev/null
"$PY" - "$work/image.json" "$2" >"$work/image-checks" 2>&1 <<'EOF'
import json, sys
backend = sys.argv[2]
img = json.load(open(sys.argv[1]))
img = img[0] if isinstance(img, list) else img
cfg = img.get("Config") or {}
def say(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
# Docker: Config.Healthcheck; podman: a top-level Healthcheck
hc = (cfg.get("Healthcheck") or img.get("Healthcheck") or {}).get("Test") or []
say(any("/health" in t for t in hc), f"image HEALTHCHECK probes /health: {hc}")
user = str(cfg.get("User") or "")
name = user.split(":")[0]
say(name not in ("", "0", "root"), f"image runs as a non-root user: {user!r}")
say(name.isdigit(), f"image user is numeric (Kubernetes runAsNonRoot can verify it): {user!r}")
say("8080/tcp" in (cfg.get("ExposedPorts") or {}), f"image EXPOSEs 8080: {sorted(cfg.get('ExposedPorts') or {})}")
say(cfg.get("Entrypoint") == ["moeserve"], f"ENTRYPOINT [\"moeserve\"]: {cfg.get('Entrypoint')}")
say(cfg.get("Cmd") == ["serve"], f"CMD [\"serve\"]: {cfg.get('Cmd')}")
env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
for k, v in (("MOESERVE_HOST", "0.0.0.0"), ("MOESERVE_PORT", "8080"), ("MOESERVE_MODEL", "/models"),
             ("MOESERVE_BACKEND", backend)):
    say(env.get(k) == v, f"ENV {k}={v}: {env.get(k)!r}")
desc = (cfg.get("Labels") or {}).get("org.opencontainers.image.description") or ""
say(f"(backend: {backend})" in desc, f"description names the backend {backend}: {desc!r}")
EOF
while read -r line; do
  case "$line" in
    "ok   "*) ok "$2 image: ${line#ok   }" ;;
    "FAIL "*) bad "$2 image: ${line#FAIL }" ;;
    *) bad "$2 image inspect: $line" ;;
  esac
done <"$work/image-checks"
}
image_checks "$IMAGE" cpu

# in_image OUT ARG...: `$PODMAN run ARG...` once, hardened as deploy/ runs it
# and with no device passed (so no GPU); its output in $work/OUT, its status
in_image() {
  local out=$1; shift
  # shellcheck disable=SC2086
  $PODMAN run ${PODMAN_RUN_FLAGS:-} --rm $hc_flags --read-only --cap-drop=ALL \
    --security-opt=no-new-privileges "$@" >"$work/$out" 2>&1 </dev/null
}
# said OUT: the last line the run printed (podman without systemd adds
# `time=... level=error msg="unable to get systemd connection ..."` lines about
# its HEALTHCHECK timer to the output, even with the interval disabled)
said() { grep -v '^time=".*level=' "$work/$1" | tail -1; }
# no_device IMAGE VARIANT WANT: `serve` and `generate` on the rocm backend exit
# 69 (EX_UNAVAILABLE) before listening and say why (WANT, for grep -E)
no_device() {
  local img=$1 v=$2 want=$3 rc
  in_image rocm-serve.log "$img" serve --backend rocm; rc=$?
  check "$v image: serve --backend rocm without a GPU exits 69 ($rc): $(said rocm-serve.log)" \
    eval '[ "$rc" = 69 ] && grep -qE "$want" "$work/rocm-serve.log"'
  in_image rocm-gen.log "$img" generate --backend rocm --tokens 1,2 --max-tokens 1; rc=$?
  check "$v image: generate --backend rocm exits 69 ($rc): $(said rocm-gen.log)" \
    eval '[ "$rc" = 69 ] && grep -qE "$want" "$work/rocm-gen.log"'
}
# The CPU image is built with -Drocm=disabled: no HIP runtime in it
if in_image ldd.log --entrypoint ldd "$IMAGE" /usr/local/bin/moeserve; then
  check "cpu image: the binary does not link the HIP runtime" eval '! grep -q libamdhip64 "$work/ldd.log"'
else
  cat "$work/ldd.log"; bad "cpu image: ldd /usr/local/bin/moeserve"
fi
no_device "$IMAGE" cpu 'no ROCm/HIP device: this moeserve was built without HIP'

# ---- a small checkpoint, mounted read-only ---------------------------------------------
# vocab 4200 (the embedded default model has 4096): a prompt id above 4095 is
# accepted only when the mounted checkpoint is the one served.
model="$work/model"
if "$PY" "$SRC/tools/gptoss_ckpt.py" --preset default --vocab 4200 --out "$model" >"$work/ckpt.log" 2>&1; then
  ok "checkpoint generated"
else
  cat "$work/ckpt.log"; bad "checkpoint generated"; finish
fi
chmod 755 "$work" "$model"; chmod 644 "$model"/*   # the container user (uid 10001) reads it

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
publish="-p $port:$port"
case " ${PODMAN_RUN_FLAGS:-} " in *" --network host "*|*" --network=host "*) publish="" ;; esac
# hardened as in deploy/kubernetes.yaml: read-only root, no capabilities
# shellcheck disable=SC2086
if $PODMAN run ${PODMAN_RUN_FLAGS:-} -d --name "$cname" $hc_flags \
     --read-only --cap-drop=ALL --security-opt=no-new-privileges \
     $publish \
     -e MOESERVE_PORT="$port" -e MOESERVE_MODEL=/models \
     -e MOESERVE_SERVED_MODEL_NAME=ckpt-test -e MOESERVE_THREADS=2 \
     -v "$model:/models:ro" "$IMAGE" >"$work/run.log" 2>&1; then
  ok "container starts (port $port)"
else
  cat "$work/run.log"; bad "container starts"; finish
fi

# wait_health URL CONTAINER OUT: poll URL/health (into OUT) for up to 2
# minutes while CONTAINER runs; sets code to the last status ("000": none)
wait_health() {
  code=000
  for _ in $(seq 1 240); do
    code=$(curl -s -o "$3" -w '%{http_code}' --max-time 2 "$1/health" 2>/dev/null || true)
    [ "$code" = 200 ] && break
    state=$($PODMAN inspect --format '{{.State.Status}}' "$2" 2>/dev/null || echo gone)
    case "$state" in running|created|configured|initialized) ;; *) break ;; esac
    sleep 0.5
  done
}

# ---- /health, bounded wait -------------------------------------------------------------
wait_health "$base" "$cname" "$work/health.json"
if [ "$code" = 200 ]; then
  ok "GET /health from the host: 200 $(cat "$work/health.json")"
else
  bad "GET /health from the host: $code (waited up to 120 s); logs:"
  $PODMAN logs "$cname" 2>&1 | tail -20
  finish
fi
code=$(curl -s -o "$work/live.json" -w '%{http_code}' --max-time 5 "$base/live" || true)
check "GET /live: $code $(cat "$work/live.json" 2>/dev/null)" [ "$code" = 200 ]

# completes URL MODEL OUT: one completion of a token prompt (id 4150 exists
# only in the test checkpoint) answered 200 by URL as MODEL, into OUT;
# sets code to its status
completes() {
  code=$(curl -s -o "$3" -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' \
    -d "{\"model\": \"$2\", \"prompt\": [1, 2, 3, 4150], \"max_tokens\": 4, \"temperature\": 0}" \
    "$1/v1/completions" || true)
  [ "$code" = 200 ] && "$PY" - "$3" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["choices"][0]
u = r["usage"]
assert r["object"] == "text_completion", r
assert r["model"] == sys.argv[2], r["model"]
assert c["finish_reason"] in ("length", "stop"), c
assert u["prompt_tokens"] == 4, u
assert 1 <= u["completion_tokens"] <= 4, u
assert c["finish_reason"] == "stop" or u["completion_tokens"] == 4, r
EOF
}

# ---- one completion ------------------------------------------------------------------
if completes "$base" ckpt-test "$work/completion.json"; then
  ok "POST /v1/completions (token prompt, id 4150 exists only in the mounted model): $(cat "$work/completion.json")"
else
  bad "POST /v1/completions: $code $(cat "$work/completion.json" 2>/dev/null)"
fi
code=$(curl -s -o "$work/models.json" -w '%{http_code}' --max-time 5 "$base/v1/models" || true)
check "GET /v1/models names MOESERVE_SERVED_MODEL_NAME: $(cat "$work/models.json" 2>/dev/null)" \
  grep -q '"id":"ckpt-test"' "$work/models.json"

# ---- inside the container ---------------------------------------------------------------
uid=$($PODMAN exec "$cname" id -u 2>&1)
nonroot() { [[ "$uid" =~ ^[0-9]+$ ]] && [ "$uid" != 0 ]; }
check "the server runs as uid $uid (non-root)" nonroot
if $PODMAN exec "$cname" bash -c ': > /models/written' >/dev/null 2>&1; then
  bad "the model mount is read-only (a write to /models succeeded)"
else
  ok "the model mount is read-only"
fi
if [ "$is_podman" = 1 ]; then
  hc=$($PODMAN healthcheck run "$cname" 2>&1); rc=$?
  check "the image's HEALTHCHECK passes in the running container: rc $rc ${hc:-healthy}" [ "$rc" = 0 ]
else
  hc=$($PODMAN inspect --format '{{json .Config.Healthcheck}}' "$cname" 2>&1)
  check "the container carries the HEALTHCHECK: $hc" grep -q /health <<<"$hc"
fi

# ---- graceful stop ------------------------------------------------------------------
$PODMAN stop -t 40 "$cname" >/dev/null 2>&1
ex=$($PODMAN inspect --format '{{.State.ExitCode}}' "$cname" 2>&1)
check "SIGTERM stops it cleanly (exit code $ex)" [ "$ex" = 0 ]
$PODMAN logs "$cname" >"$work/server.log" 2>&1 || true
check "server log shows ready and stopping" grep -q "stopping" "$work/server.log"
if [ "$fail" -gt 0 ]; then echo "--- server log"; cat "$work/server.log"; fi
$PODMAN rm -f "$cname" >/dev/null 2>&1 || true

# ---- no mount: the embedded default model behind /models ---------------------------------
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
[ -n "$publish" ] && publish="-p $port:$port"
# shellcheck disable=SC2086
if $PODMAN run ${PODMAN_RUN_FLAGS:-} -d --name "$cname" $hc_flags --read-only $publish \
     -e MOESERVE_PORT="$port" "$IMAGE" >"$work/run.log" 2>&1; then
  code=000
  for _ in $(seq 1 120); do
    code=$(curl -s -o "$work/health.json" -w '%{http_code}' --max-time 2 "$base/health" 2>/dev/null || true)
    [ "$code" = 200 ] && break
    sleep 0.5
  done
  code=$(curl -s -o "$work/completion.json" -w '%{http_code}' --max-time 60 \
    -H 'Content-Type: application/json' \
    -d '{"prompt": "And the LORD said unto Moses", "max_tokens": 8, "temperature": 0}' \
    "$base/v1/completions" || true)
  # the trained default model (models/default/bf16) answers with words
  check "without a mount it serves the embedded default model: /v1/completions $code $(cat "$work/completion.json" 2>/dev/null)" \
    "$PY" -c 'import json, re, sys; t = json.load(open(sys.argv[1]))["choices"][0]["text"]; sys.exit(len(re.findall("[A-Za-z]+", t)) < 3)' "$work/completion.json"
else
  cat "$work/run.log"; bad "container without a mount starts"
fi

# (the CPU image's last container is done with: its cores go to the kube pod
# and to the rocm build)
$PODMAN rm -f -t 0 "$cname" >/dev/null 2>&1 || $PODMAN rm -f "$cname" >/dev/null 2>&1 || true

# ---- the CPU Kubernetes example under `podman kube play` ----------------------------------
# deploy/kubernetes.yaml as podman plays it on this one machine: a copy made by
# kube_playable.py (the image built above, the checkpoint above as a read-only
# hostPath, a free host port for the http port, 2 threads and a CPU/memory
# request and limit to match, one replica, a name of this run's own; the
# PersistentVolumeClaim dropped; each change commented there), played, checked
# from the host, and taken down. What podman 4.3.1 does with the rest (seen):
#  - Service and PodDisruptionBudget: ignored, without a word (no pod, no error);
#  - livenessProbe: the container's healthcheck (`curl -f http://localhost:0/live
#    || exit 1`, with its period, timeout and failureThreshold: checked below);
#    startupProbe and readinessProbe: not mapped. The named port `http` comes
#    out as 0 and the image has no curl, so that healthcheck could not pass;
#    without systemd podman never schedules it, and it is not run here.
#  - terminationGracePeriodSeconds and lifecycle.preStop: ignored (the stop
#    timeout stays podman's 10 s); `kube down` stops the pod with a timeout of
#    0 (SIGKILL, exit 137, no drain, no "stopping" logged): said, not checked;
#  - the /tmp emptyDir: an anonymous volume, removed with the pod (sizeLimit
#    ignored); the optional Secret, absent: MOESERVE_API_KEY unset.
# Where the engine is docker, or a podman without `kube play`, it is skipped
# with a line saying so.
kube_smoke() {
  local kport kbase code rc state t0 t1 ms grace prestop how ex waited
  kport=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  kbase="http://127.0.0.1:$kport"
  if "$PY" "$here/kube_playable.py" --yaml "$SRC/deploy/kubernetes.yaml" --image "$IMAGE" \
       --model "$model" --port "$kport" --threads 2 --memory-request 256Mi --memory-limit 1Gi \
       --name "$kname" --out "$kube_yaml" >"$work/kube-copy.log" 2>&1; then
    ok "kube: a playable copy of deploy/kubernetes.yaml: $(paste -sd';' "$work/kube-copy.log" | sed 's/;/; /g')"
  else
    cat "$work/kube-copy.log"; bad "kube: a playable copy of deploy/kubernetes.yaml"; return
  fi
  # kube play has no --ulimit: the limits the sandbox needs (PODMAN_RUN_FLAGS)
  # reach the pod's containers, its infra container too, as default_ulimits of
  # a containers.conf of this run's own, read in place of the system's by
  # `kube play` only (Debian's holds nothing but podman's defaults)
  local ulimits kube_env=""
  ulimits=$(grep -oE -- '--ulimit[= ][^ ]+' <<<" ${PODMAN_RUN_FLAGS:-} " | sed -E 's/^--ulimit[= ]//')
  if [ -n "$ulimits" ]; then
    # shellcheck disable=SC2086  # one "nofile=1024:1024" string each
    { echo "[containers]"
      printf 'default_ulimits = [%s]\n' "$(printf '"%s", ' $ulimits | sed 's/, $//')"
    } >"$work/kube-containers.conf"
    kube_env="CONTAINERS_CONF=$work/kube-containers.conf"
  fi
  kube_played=1
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  env $kube_env $PODMAN kube play "$kube_yaml" >"$work/kube-play.log" 2>&1; rc=$?
  # podman without systemd adds level=error lines about healthcheck timers
  echo "container: kube play: $(grep -v '^time=".*level=' "$work/kube-play.log" \
    | grep -v 'failed to connect to syslog' | paste -sd' ' | sed 's/ *$//')"
  check "kube play ($rc): the Deployment's one pod $kpod; Service and PodDisruptionBudget in the copy pass" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "^Pod:" "$work/kube-play.log")" = 1 ] && $PODMAN pod exists "$kpod" && grep -q "^kind: Service" "$kube_yaml" && grep -q "^kind: PodDisruptionBudget" "$kube_yaml"'
  [ "$rc" = 0 ] || return

  wait_health "$kbase" "$kctr" "$work/kube-health.json"
  t1=$(date +%s%N)
  if [ "$code" = 200 ]; then
    ok "kube: GET /health on host port $kport: 200 $(cat "$work/kube-health.json") $(( (t1 - t0) / 1000000 )) ms after kube play"
  else
    bad "kube: GET /health on host port $kport: $code (waited up to 120 s, container $state); logs:"
    $PODMAN logs "$kctr" 2>&1 | tail -20
    return
  fi
  # the copy serves MOESERVE_SERVED_MODEL_NAME gpt-oss-20b, unauthenticated
  # (the optional Secret is absent); token 4150 exists only in the checkpoint
  if completes "$kbase" gpt-oss-20b "$work/kube-completion.json"; then
    ok "kube: POST /v1/completions (the hostPath checkpoint, id 4150): 200 $(cat "$work/kube-completion.json")"
  else
    bad "kube: POST /v1/completions: $code $(cat "$work/kube-completion.json" 2>/dev/null)"
  fi
  code=$(curl -s -o "$work/kube-live.json" -w '%{http_code}' --max-time 5 "$kbase/live" || true)
  check "kube: GET /live: $code $(cat "$work/kube-live.json" 2>/dev/null)" [ "$code" = 200 ]

  # the container as podman made it from the copy (podman inspect)
  local kuid
  kuid=$($PODMAN exec "$kctr" id -u 2>&1)
  check "kube: the server runs as uid $kuid (runAsUser 10001)" [ "$kuid" = 10001 ]
  $PODMAN inspect "$kctr" >"$work/kube-inspect.json" 2>"$work/kube-inspect.err" || cat "$work/kube-inspect.err"
  "$PY" - "$work/kube-inspect.json" "$kube_yaml" "$model" >"$work/kube-checks" 2>&1 <<'EOF'
import json, sys, yaml
ins = json.load(open(sys.argv[1]))
ins = ins[0] if isinstance(ins, list) else ins
dep = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d and d.get("kind") == "Deployment"][0]
pod = dep["spec"]["template"]["spec"]
c = pod["containers"][0]
cfg, host = ins.get("Config") or {}, ins.get("HostConfig") or {}
def say(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
def quantity(q):
    q = str(q)
    for suf, mul in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("m", 0.001)):
        if q.endswith(suf):
            return float(q[:-len(suf)]) * mul
    return float(q)
uid = str(pod["securityContext"]["runAsUser"])
say(str(cfg.get("User", "")).split(":")[0] == uid, f"user {cfg.get('User')!r} (runAsUser {uid})")
say(host.get("ReadonlyRootfs") is True, f"read-only root filesystem: {host.get('ReadonlyRootfs')}")
say(not ins.get("EffectiveCaps") and "no-new-privileges" in (host.get("SecurityOpt") or []),
    f"capabilities {ins.get('EffectiveCaps')}, {host.get('SecurityOpt')} (drop ALL, no privilege escalation)")
mounts = {m.get("Destination"): m for m in ins.get("Mounts") or []}
m = mounts.get("/models") or {}
say(m.get("Source") == sys.argv[3] and m.get("RW") is False, f"/models: {m.get('Source')} read-only (RW {m.get('RW')})")
t = mounts.get("/tmp") or {}
say(t.get("RW") is True, f"/tmp: the emptyDir, a {t.get('Type')} (RW {t.get('RW')})")
lim, req = c["resources"]["limits"], c["resources"]["requests"]
cpu = (host.get("CpuQuota") or 0) / (host.get("CpuPeriod") or 1)
say(abs(cpu - quantity(lim["cpu"])) < 0.01 and host.get("Memory") == quantity(lim["memory"])
    and host.get("MemoryReservation") == quantity(req["memory"]),
    f"resources: CPU quota {cpu:g} cores, memory limit {host.get('Memory')}, reservation "
    f"{host.get('MemoryReservation')} (limits {lim}, requests {req})")
# probes: podman 4.3.1 makes the livenessProbe the container's healthcheck
hc = cfg.get("Healthcheck") or {}
test = " ".join(hc.get("Test") or [])
lp = c["livenessProbe"]
say(lp["httpGet"]["path"] in test and hc.get("Interval") == lp["periodSeconds"] * 10**9
    and hc.get("Timeout") == lp["timeoutSeconds"] * 10**9 and hc.get("Retries") == lp["failureThreshold"],
    f"livenessProbe -> healthcheck {test!r}, every {hc.get('Interval', 0) / 1e9:g} s, "
    f"timeout {hc.get('Timeout', 0) / 1e9:g} s, {hc.get('Retries')} retries")
for p in ("startupProbe", "readinessProbe"):
    path = c[p]["httpGet"]["path"]
    print(f"note {p} ({path}): {'in the healthcheck' if path in test else 'not mapped by this podman'}")
print(f"note terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds')}: "
      f"the container's stop timeout is {cfg.get('StopTimeout')} s")
env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
print(f"note the optional Secret moeserve-api-key, absent: MOESERVE_API_KEY "
      f"{'set' if 'MOESERVE_API_KEY' in env else 'unset'}")
EOF
  while read -r line; do
    case "$line" in
      "ok   "*) ok "kube: ${line#ok   }" ;;
      "FAIL "*) bad "kube: ${line#FAIL }" ;;
      "note "*) echo "container: kube: ${line#note }" ;;
      *) bad "kube inspect: $line" ;;
    esac
  done <"$work/kube-checks"

  # ---- kube down: how it stops ----
  # the grace period, and how long preStop sleeps (a stop shorter than that
  # did not run it)
  read -r grace prestop < <("$PY" - "$kube_yaml" <<'EOF'
import sys, yaml
pod = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "Deployment"][0]["spec"]["template"]["spec"]
cmd = pod["containers"][0].get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command") or []
print(pod.get("terminationGracePeriodSeconds", 30), cmd[1] if len(cmd) == 2 and cmd[0] == "sleep" else 0)
EOF
)
  # its exit code and last log lines, read as it stops (kube down removes it)
  $PODMAN wait "$kctr" >"$work/kube-exit" 2>&1 </dev/null &
  kube_bg="$kube_bg $!"
  $PODMAN logs -f "$kctr" >"$work/kube-server.log" 2>&1 </dev/null &
  kube_bg="$kube_bg $!"
  sleep 1
  t0=$(date +%s%N)
  $PODMAN kube down "$kube_yaml" >"$work/kube-down.log" 2>&1; rc=$?
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  for _ in $(seq 1 20); do
    waited=1
    for p in $kube_bg; do kill -0 "$p" 2>/dev/null && waited=0; done
    [ "$waited" = 1 ] && break
    sleep 0.5
  done
  ex=$(grep -E '^[0-9]+$' "$work/kube-exit" | tail -1)
  case "$ex" in
    0) how="SIGTERM, exit 0" ;;
    137) how="killed, exit 137 (SIGKILL)" ;;
    143) how="SIGTERM unhandled, exit 143" ;;
    "") how="exit code unknown ($(tail -1 "$work/kube-exit"))" ;;
    *) how="exit $ex" ;;
  esac
  if grep -q stopping "$work/kube-server.log"; then
    how="$how, \"stopping\" logged (drained)"
  else
    how="$how, no \"stopping\" in its log (no drain)"
  fi
  [ "$prestop" -gt 0 ] && [ "$ms" -lt $((prestop * 1000)) ] && how="$how, preStop (sleep $prestop) not run"
  check "kube down ($rc): stopped in $ms ms, within terminationGracePeriodSeconds $grace s: $how" \
    eval '[ "$rc" = 0 ] && [ "$ms" -le $((grace * 1000)) ]'
  if $PODMAN pod exists "$kpod" || $PODMAN container exists "$kctr"; then
    bad "kube down: pod $kpod is gone ($($PODMAN pod ps --filter name="$kpod" --format '{{.Name}} {{.Status}}' 2>&1))"
  else
    ok "kube down: pod $kpod and its container are gone"
    kube_played=0
  fi
}
if [ "$is_podman" != 1 ]; then
  echo "container: skipped kube play: the engine is $PODMAN, and kube play is podman's"
elif ! $PODMAN kube play --help >/dev/null 2>&1; then
  echo "container: skipped kube play: $PODMAN has no \`kube play\` (podman 4 or later has)"
else
  t_kube=$(date +%s)
  kube_smoke
  echo "container: kube play part: $(( $(date +%s) - t_kube )) s"
fi

# ---- the ROCm variant ------------------------------------------------------------------
# Built from the same sources with BACKEND=rocm (a larger toolchain, and hipcc
# compiles the GPU kernels for two targets: ~1 min more). No GPU here, so it is
# checked up to the device: it starts, links the HIP runtime from Debian's
# packages (and has comgr, which that runtime dlopens: ldd cannot see it),
# runs the CPU backend when asked, and refuses the GPU backend with exit 69,
# by default too (ENV MOESERVE_BACKEND=rocm).
if [ "$ROCM" = 1 ]; then
  echo "container: building $ROCM_IMAGE (BACKEND=rocm; log: build-rocm.log, tail on failure)"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if $PODMAN build ${PODMAN_BUILD_FLAGS:-} $fmt --build-arg BACKEND=rocm -t "$ROCM_IMAGE" \
       -f "$SRC/Dockerfile" "$SRC" >"$work/build-rocm.log" 2>&1; then
    ok "rocm image builds ($(( $(date +%s) - t0 )) s)"
  else
    tail -40 "$work/build-rocm.log"
    bad "rocm image builds"
    finish
  fi
  size=$($PODMAN image inspect --format '{{.Size}}' "$ROCM_IMAGE" 2>/dev/null || echo 0)
  echo "container: rocm image size $size bytes ($((size / 1000000)) MB)"
  image_checks "$ROCM_IMAGE" rocm

  in_image version.log "$ROCM_IMAGE" --version; rc=$?
  check "rocm image: moeserve --version starts ($rc): $(said version.log)" \
    eval '[ "$rc" = 0 ] && grep -q "^moeserve " "$work/version.log"'
  in_image help.log "$ROCM_IMAGE" serve --help; rc=$?
  check "rocm image: serve --help ($rc) lists --backend and --device" \
    eval '[ "$rc" = 0 ] && grep -q -- "--backend" "$work/help.log" && grep -q -- "--device" "$work/help.log"'
  if in_image ldd.log --entrypoint ldd "$ROCM_IMAGE" /usr/local/bin/moeserve; then
    check "rocm image: the binary links libamdhip64.so.5, every library resolved" \
      eval 'grep -q "libamdhip64.so.5 => /" "$work/ldd.log" && ! grep -q "not found" "$work/ldd.log"'
  else
    cat "$work/ldd.log"; bad "rocm image: ldd /usr/local/bin/moeserve"
  fi
  in_image comgr.log --entrypoint bash "$ROCM_IMAGE" -c 'ls /usr/lib/x86_64-linux-gnu/libamd_comgr.so.2'
  check "rocm image: libamd_comgr.so.2 (dlopened by the HIP runtime) is installed" \
    grep -q libamd_comgr "$work/comgr.log"
  in_image cpu-gen.log "$ROCM_IMAGE" generate --backend cpu --tokens 1,2,3 --max-tokens 2; rc=$?
  check "rocm image: generate --backend cpu on the embedded model ($rc): $(said cpu-gen.log)" \
    eval '[ "$rc" = 0 ]'
  no_device "$ROCM_IMAGE" rocm 'no ROCm/HIP device \(hip: hipErrorNoDevice\)'
  # the image's default command: `serve`, on MOESERVE_BACKEND=rocm
  in_image rocm-default.log "$ROCM_IMAGE"; rc=$?
  check "rocm image: its default command exits 69 without a GPU ($rc): $(said rocm-default.log)" \
    eval '[ "$rc" = 69 ] && grep -q "no ROCm/HIP device" "$work/rocm-default.log"'
fi

finish
