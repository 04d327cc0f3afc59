#!/usr/bin/env bash
# tests/device/run.sh: the checks that need a GPU, run on a lent NVIDIA
# machine (an H200: 16 cores, /usr/local/cuda/bin/nvcc, no network) from the
# repository root, within a time budget (8 minutes by default):
#
#   deps          what the build needs, each missing one named (with its
#                 Debian package) before anything is compiled
#   configure     meson setup build-device -Dgpu_platform=nvidia (the rocm
#                 backend's kernels built by nvcc), -Dtests=enabled where
#                 Check is there
#   build         moeserve and tests/engine/test-rocm only
#   kernels       tests/engine/test-rocm against the GPU (MOESERVE_TEST_BACKEND=rocm)
#   golden        tests/e2e/golden.py, MOESERVE_BACKEND=rocm MOESERVE_EXACT=1
#   quant-golden  tests/quant/quant_golden.py, the same
#   ckpt-mxfp4,   the issue-7 bench checkpoint (tools/bench_ckpt.py) in MXFP4
#   ckpt-quark    and Quark W4A8, written in the background from the start
#                 into a temporary folder (not under $OUT)
#   bench-mxfp4,  moeserve bench --backend rocm on each
#   bench-quark
#
# Every step has its own timeout, never past the budget, and keeps time for
# the steps after it; a failed step is reported and the others still run
# (those that need its output are skipped, saying why). What comes back in
# $OUT (or --out DIR): device.log (every step's output) and summary.json
# (mode, device, each step's status and seconds, the bench JSON lines),
# written again after every step, so a run cut short still has one; and the
# two bench tables. Exit status: 0 when every step passed, 1 otherwise, 64
# for a usage error.
#
#   OUT=DIR tests/device/run.sh [--sim] [--out DIR] [--budget S] [--keep]
#       [--build DIR] [--debs DIR]
#
# The build goes to build-device (--sim: build-device-sim) or --build DIR,
# kept for the next call; --keep keeps the temporary folder too.
#
# --sim runs the same steps on rocm-sim (the kernels on the host model of
# the GPU) here, without nvcc: the build without device kernels
# (-Drocm=disabled), a golden preset or two, a shrunk bench checkpoint, the
# bench's small rocm-sim defaults; a default budget of 20 minutes (a 2-core
# machine builds for minutes). It tests the script, not the GPU.
#
# --debs DIR (best effort): Debian packages (.deb) of the build's missing
# libraries, unpacked into a private root that pkg-config, CMake, the
# compiler and the loader are pointed at (use_debs below lists them).
set -u

usage() {
	sed -n '2,/^set -u/p' "$0" | sed -n 's/^# \{0,1\}//p' >&2
	exit 64
}

MODE=device
BUDGET=
KEEP=0
DEBS=
BUILD_ARG=
OUT_DIR=${OUT:-}
while [ $# -gt 0 ]; do
	case "$1" in
	--sim) MODE=sim ;;
	--out) OUT_DIR=${2:?--out DIR}; shift ;;
	--budget) BUDGET=${2:?--budget SECONDS}; shift ;;
	--debs) DEBS=${2:?--debs DIR}; shift ;;
	--build) BUILD_ARG=${2:?--build DIR}; shift ;;
	--keep) KEEP=1 ;;
	-h|--help) usage ;;
	*) echo "run.sh: unknown argument $1" >&2; usage ;;
	esac
	shift
done
[ -n "$OUT_DIR" ] || { echo "run.sh: set OUT or give --out DIR" >&2; exit 64; }
[ -n "$BUDGET" ] || BUDGET=$([ "$MODE" = sim ] && echo 1200 || echo 480)
case "$BUDGET" in *[!0-9]*|'') echo "run.sh: --budget $BUDGET: seconds" >&2; exit 64 ;; esac

# from the repository root, wherever it was started
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG=$OUT_DIR/device.log
SUMMARY=$OUT_DIR/summary.json
: >"$LOG"
TMPD=$(mktemp -d "${TMPDIR:-/tmp}/ms-device.XXXXXX") || exit 1
STEPS=$TMPD/steps.tsv
: >"$STEPS"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
JOBS=$(nproc 2>/dev/null || echo 4)
BG_NAMES=

cleanup() {
	local n
	for n in $BG_NAMES; do
		[ -f "$TMPD/$n.rc" ] || bg_kill "$n"
	done
	wait 2>/dev/null
	[ "$KEEP" = 1 ] || rm -rf "$TMPD"
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >>"$LOG"; exit 1' INT TERM

log() {
	printf '%s\n' "$*" | tee -a "$LOG"
}

now_s() {
	date +%s.%N
}

# ---- steps and the summary ----

# record NAME STATUS SECONDS RC DETAIL: one line of steps.tsv (tabs and
# newlines in DETAIL flattened), then the summary rewritten.
record() {
	local detail=${5//$'\t'/ }
	detail=${detail//$'\n'/; }
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$detail" >>"$STEPS"
	log "-- $1: $2 ($3 s${5:+; $detail})"
	write_summary
}

status_of() {
	awk -F'\t' -v n="$1" '$1 == n { s = $2 } END { print s }' "$STEPS"
}

# Seconds a step may take: its own cap, never closer to the deadline than
# the time kept for the steps after it (and for the summary).
allowance() {
	local cap=$1 keep=$2 left
	left=$((DEADLINE - $(date +%s) - keep - 5))
	[ "$left" -lt "$cap" ] && cap=$left
	echo "$cap"
}

# step NAME CAP KEEP CMD...: run CMD under timeout, output to the log.
step() {
	local name=$1 cap=$2 keep=$3 t t0 rc status
	shift 3
	t=$(allowance "$cap" "$keep")
	if [ "$t" -lt 5 ]; then
		record "$name" skipped 0 "" "no time left in the ${BUDGET} s budget"
		return 1
	fi
	log "== $name (at most ${t} s): $*"
	t0=$(now_s)
	timeout -k 10 "$t" "$@" 2>&1 </dev/null | tee -a "$LOG" >"$TMPD/$name.out"
	rc=${PIPESTATUS[0]}
	case $rc in
	0) status=pass ;;
	124|137) status=timeout ;;
	*) status=fail ;;
	esac
	record "$name" "$status" "$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }')" \
		"$rc" "$(why "$status" "$t" "$TMPD/$name.out")"
	[ $status = pass ]
}

# why STATUS LIMIT FILE: what summary.json says of a step that did not
# pass: its last error lines (else its last lines), a few hundred bytes.
why() {
	local lines
	[ "$1" = pass ] && return 0
	[ "$1" = timeout ] && printf 'killed after %s s; ' "$2"
	lines=$(grep -E 'error|FAIL|[Ff]ailed|Traceback' "$3" 2>/dev/null | tail -n 3)
	[ -n "$lines" ] || lines=$(tail -n 3 "$3" 2>/dev/null)
	printf '%s' "$lines" | head -c 600
}

# skip NAME WHY: a step that cannot run.
skip() {
	record "$1" skipped 0 "" "$2"
}

# bg_start NAME CAP CMD...: CMD in the background under timeout, output to
# TMPD/NAME.log; bg_wait NAME KEEP records it. timeout leads a process
# group of its own (it and CMD with every worker CMD starts): bg_kill ends
# that group, whose leader's pid the wrapper writes to TMPD/NAME.pid.
bg_start() {
	local name=$1 cap=$2
	shift 2
	log "== $name (background, at most ${cap} s): $*"
	bash -c 't0=$(date +%s.%N)
		timeout -k 10 "$@" >"$0.log" 2>&1 </dev/null &
		echo $! >"$0.pid"
		wait $!
		echo $? >"$0.rc"
		awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN { printf \"%.1f\n\", b - a }" >"$0.secs"' \
		"$TMPD/$name" "$cap" "$@" &
	BG_NAMES="$BG_NAMES $name"
	eval "BG_$(echo "$name" | tr -c 'A-Za-z0-9\n' _)=$!"
}

bg_kill() {
	local p
	p=$(cat "$TMPD/$1.pid" 2>/dev/null) || return 0
	[ -n "$p" ] && { kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; }
	return 0
}

bg_wait() {
	local name=$1 keep=$2 var pid t rc
	var=BG_$(echo "$name" | tr -c 'A-Za-z0-9\n' _)
	pid=${!var:-}
	[ -n "$pid" ] || { skip "$name" "not started"; return 1; }
	t=$(allowance 100000 "$keep")
	while kill -0 "$pid" 2>/dev/null && [ "$t" -gt 0 ]; do
		sleep 1
		t=$((t - 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		bg_kill "$name"
		cat "$TMPD/$name.log" >>"$LOG" 2>/dev/null
		record "$name" timeout "$(($(date +%s) - START))" 124 "still running at its turn"
		return 1
	fi
	wait "$pid" 2>/dev/null
	cat "$TMPD/$name.log" >>"$LOG" 2>/dev/null
	rc=$(cat "$TMPD/$name.rc" 2>/dev/null || echo 1)
	case $rc in
	0) record "$name" pass "$(cat "$TMPD/$name.secs")" 0 "" ;;
	124|137) record "$name" timeout "$(cat "$TMPD/$name.secs")" "$rc" "killed at its cap" ;;
	*) record "$name" fail "$(cat "$TMPD/$name.secs")" "$rc" "$(why fail 0 "$TMPD/$name.log")" ;;
	esac
	[ "$rc" = 0 ]
}

# summary.json: with any python3 (json is in its standard library), else
# the steps alone, by hand.
write_summary() {
	local py=${PY:-$(command -v python3 || true)}
	if [ -n "$py" ] && "$py" - "$STEPS" "$SUMMARY" "$MODE" "$BUDGET" "$START" "$TMPD" \
		>/dev/null 2>>"$LOG" <<'EOF'
import json, os, sys, time
steps_file, out, mode, budget, start, tmpd = sys.argv[1:7]
steps = []
for line in open(steps_file):
    name, status, secs, rc, detail = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
    s = {"name": name, "status": status, "seconds": float(secs or 0)}
    if rc:
        s["rc"] = int(rc)
    if detail:
        s["detail"] = detail
    steps.append(s)
def text(name):
    try:
        with open(os.path.join(tmpd, name)) as f:
            return f.read().strip()
    except OSError:
        return None
bench = {}
for fmt in ("mxfp4", "quark"):
    line = text(f"bench-{fmt}.json")
    if line:
        try:
            bench[fmt] = json.loads(line)
        except ValueError:
            bench[fmt] = {"unparsed": line[:2000]}
device = text("device.txt") or next((b.get("device") for b in bench.values() if b.get("device")), None)
summary = {
    "mode": mode, "budget_s": int(budget), "elapsed_s": round(time.time() - int(start), 1),
    "device": device, "nvidia_smi": text("nvidia-smi.txt"), "nvcc": text("nvcc.txt"),
    "commit": text("commit.txt"), "missing": [m for m in (text("missing.txt") or "").split("\n") if m],
    "passed": sum(s["status"] == "pass" for s in steps),
    "failed": sum(s["status"] in ("fail", "timeout") for s in steps),
    "skipped": sum(s["status"] == "skipped" for s in steps),
    "steps": steps, "bench": bench,
}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
os.replace(tmp, out)
EOF
	then
		return 0
	fi
	{
		printf '{"mode": "%s", "steps": [' "$MODE"
		awk -F'\t' '{ gsub(/["\\]/, "", $5); printf "%s{\"name\": \"%s\", \"status\": \"%s\", \"seconds\": %s, \"detail\": \"%s\"}", NR > 1 ? ", " : "", $1, $2, $3 + 0, $5 }' "$STEPS"
		printf ']}\n'
	} >"$SUMMARY"
}

# ---- what the build needs ----

# A python3 with numpy: the tools and golden tests need it (Debian's
# /usr/bin/python3 with python3-numpy, or the machine's own).
find_python() {
	local p
	for p in ${PYTHON:-} /usr/bin/python3 python3; do
		if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then
			command -v "$p"
			return 0
		fi
	done
	return 1
}

NVCC=
find_nvcc() {
	if [ -x /usr/local/cuda/bin/nvcc ]; then
		NVCC=/usr/local/cuda/bin/nvcc
	else
		NVCC=$(command -v nvcc || true)
	fi
	[ -n "$NVCC" ]
}

# The oneDNN CMake package meson looks for (Debian libdnnl-dev).
find_dnnl() {
	local d
	for d in ${CMAKE_PREFIX_PATH:+${CMAKE_PREFIX_PATH//:/ }} /usr /usr/local; do
		for f in "$d"/lib/*/cmake/dnnl/dnnl-config.cmake "$d"/lib/cmake/dnnl/dnnl-config.cmake \
			"$d"/lib/*/cmake/dnnl/DNNLConfig.cmake "$d"/lib/cmake/dnnl/DNNLConfig.cmake; do
			[ -f "$f" ] && return 0
		done
	done
	return 1
}

# --debs DIR: unpack every .deb into a private root and point the tools at
# it. Where the machine lacks Debian's libraries, bring (from a Debian 12
# machine, `apt-get download`): libcjson1 libcjson-dev libpcre2-8-0
# libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libpcre2-dev libmicrohttpd12
# libmicrohttpd-dev libgnutls30 libgnutls28-dev libp11-kit-dev libidn2-dev
# nettle-dev libtasn1-6-dev (gnutls.pc's requirements, which pkg-config
# reads for libmicrohttpd's flags) libnuma1 libnuma-dev libdnnl2
# libdnnl-dev check libsubunit0 libsubunit-dev, and pkgconf pkgconf-bin
# libpkgconf3 where there is no pkg-config.
use_debs() {
	# beside the build, which keeps these paths for the next call
	local root=$BUILD-debs arch f
	mkdir -p "$root"
	for f in "$DEBS"/*.deb; do
		[ -f "$f" ] || continue
		dpkg -x "$f" "$root" || return 1
	done
	arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
	export PATH="$root/usr/bin:$PATH"
	export PKG_CONFIG_PATH="$root/usr/lib/$arch/pkgconfig:$root/usr/share/pkgconfig:$root/usr/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
	export PKG_CONFIG_SYSROOT_DIR=$root
	export CMAKE_PREFIX_PATH="$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
	export CPATH="$root/usr/include${CPATH:+:$CPATH}"
	export LIBRARY_PATH="$root/usr/lib/$arch${LIBRARY_PATH:+:$LIBRARY_PATH}"
	export LD_LIBRARY_PATH="$root/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	log "debs: unpacked $(ls "$DEBS"/*.deb 2>/dev/null | wc -l) packages into $root"
}

# Every dependency, each missing one with its Debian package in
# TMPD/missing.txt; TESTS is enabled where Check is there (without it the
# kernel tests cannot build: they are skipped, the rest still runs).
TESTS=disabled
NODE_TESTS=disabled
check_deps() {
	local miss=() p m why
	for p in "cc:gcc" "meson:meson" "ninja:ninja-build" "pkg-config:pkgconf" "cmake:cmake" \
		"timeout:coreutils"; do
		command -v "${p%%:*}" >/dev/null 2>&1 || miss+=("${p%%:*} (Debian ${p#*:})")
	done
	PY=$(find_python) || miss+=("python3 with numpy (Debian python3-numpy)")
	if [ "$MODE" = device ]; then
		find_nvcc || miss+=("nvcc (CUDA toolkit, /usr/local/cuda/bin/nvcc)")
		# nvcc's host compiler
		command -v c++ >/dev/null 2>&1 || miss+=("c++ (Debian g++)")
	fi
	if command -v pkg-config >/dev/null 2>&1; then
		for m in "libcjson:libcjson-dev" "libpcre2-8:libpcre2-dev" \
			"libmicrohttpd:libmicrohttpd-dev" "numa:libnuma-dev"; do
			pkg-config --exists "${m%%:*}" 2>/dev/null && continue
			why=$(pkg-config --print-errors --exists "${m%%:*}" 2>&1 | head -n 1)
			miss+=("${m%%:*} (Debian ${m#*:})${why:+: $why}")
		done
		pkg-config --exists check 2>/dev/null && TESTS=enabled
	fi
	find_dnnl || miss+=("oneDNN's CMake package (Debian libdnnl-dev)")
	command -v node >/dev/null 2>&1 && NODE_TESTS=enabled
	printf '%s\n' "${miss[@]+"${miss[@]}"}" >"$TMPD/missing.txt"
	log "deps: python ${PY:-none}, nvcc ${NVCC:-none}, Check $([ $TESTS = enabled ] && echo yes ||
		echo 'no (kernel tests skipped)'), node $([ $NODE_TESTS = enabled ] && echo yes || echo no)"
	if [ ${#miss[@]} -gt 0 ]; then
		log "deps: MISSING (the build cannot run without them):"
		printf '  %s\n' "${miss[@]}" | tee -a "$LOG"
		log "deps: install them, or bring their .deb files and pass --debs DIR"
		return 1
	fi
	return 0
}

# ---- the machine ----

describe_machine() {
	git -C "$ROOT" rev-parse --short HEAD >"$TMPD/commit.txt" 2>/dev/null
	if [ "$MODE" = sim ]; then
		echo "host model of the HIP execution model (rocm-sim)" >"$TMPD/device.txt"
	elif command -v nvidia-smi >/dev/null 2>&1; then
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
			>"$TMPD/nvidia-smi.txt" 2>>"$LOG"
		head -n 1 "$TMPD/nvidia-smi.txt" | cut -d, -f1 >"$TMPD/device.txt"
	fi
	[ -n "$NVCC" ] && "$NVCC" --version 2>/dev/null | tail -n 1 >"$TMPD/nvcc.txt"
	log "machine: $(uname -srm), $JOBS cores; device: $(cat "$TMPD/device.txt" 2>/dev/null ||
		echo unknown); $(cat "$TMPD/nvidia-smi.txt" 2>/dev/null)"
}

# ---- the steps ----

if [ "$MODE" = sim ]; then
	BUILD=$ROOT/build-device-sim
	BACKEND=rocm-sim
	GPU_OPTS=(-Drocm=disabled)
	GOLDEN_PRESETS=(--preset tiny-bf16)
	QUANT_PRESETS=(--preset quark-w4a8)
	# the cli test's shrunk bench checkpoint: the same writer, seconds on the model
	CKPT_ARGS=(--layers 2 --experts 4 --top-k 2 --hidden 64 --intermediate 64 --heads 4
		--kv-heads 2 --head-dim 16 --vocab 256 --jobs 1)
	BENCH_ARGS=()
	BUILD_CAP=900   # two cores
else
	BUILD=$ROOT/build-device
	BACKEND=rocm
	GPU_OPTS=(-Dgpu_platform=nvidia)
	GOLDEN_PRESETS=()
	# every scheme's kernels once (a GPU run starts a CUDA context: all 17
	# presets' ~150 runs would not fit); test-rocm covers every format
	QUANT_PRESETS=(--preset gptq-4b-g64-asym-v1-descact --preset gptq-3b-gm1-asym-fused
		--preset awq-zp-g64-defuser --preset quark-w4a8 --preset quark-w4a4
		--preset quark-fp8-dynamic)
	CKPT_ARGS=(--jobs $((JOBS / 2 > 1 ? JOBS / 2 : 1)))
	BENCH_ARGS=()
	BUILD_CAP=300
fi
[ -n "$BUILD_ARG" ] && BUILD=$(mkdir -p "$(dirname "$BUILD_ARG")" && cd "$(dirname "$BUILD_ARG")" &&
	pwd)/$(basename "$BUILD_ARG")
MOESERVE=$BUILD/server/moeserve
# The least each later part needs, kept from the steps before it: both
# benches (each loads 3 GB onto the GPU), each golden, the kernel tests.
KEEP_BENCH=80
KEEP_GOLDEN=45
KEEP_BUILD=$((KEEP_BENCH + 2 * KEEP_GOLDEN + 30))

log "run.sh: $MODE mode, budget ${BUDGET} s, output in $OUT_DIR, temporary files in $TMPD"
write_summary
if [ -n "$DEBS" ]; then
	use_debs || log "debs: unpacking $DEBS failed"
fi

t0=$(now_s)
if check_deps; then
	record deps pass "$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }')" 0 ""
	DEPS_OK=1
else
	record deps fail 0 1 "missing: $(paste -sd';' "$TMPD/missing.txt")"
	DEPS_OK=0
fi
describe_machine

# The checkpoints need only python: written while the build runs.
if [ -n "${PY:-}" ]; then
	for fmt in mxfp4 quark; do
		bg_start "ckpt-$fmt" 240 "$PY" tools/bench_ckpt.py --format "$fmt" \
			--out "$TMPD/bench-$fmt" "${CKPT_ARGS[@]}"
	done
fi

BUILT=0
if [ $DEPS_OK = 1 ]; then
	if [ -f "$BUILD/build.ninja" ]; then
		# a build kept from an earlier call: the options it needs, again
		step configure 120 $((KEEP_BUILD + 60)) meson configure "$BUILD" "${GPU_OPTS[@]}" -Dtests=$TESTS \
			-Dnode_tests=$NODE_TESTS -Dpython="$PY"
	else
		step configure 120 $((KEEP_BUILD + 60)) meson setup "$BUILD" "${GPU_OPTS[@]}" -Dtests=$TESTS \
			-Dnode_tests=$NODE_TESTS -Dpython="$PY" -Dbuildtype=debugoptimized
	fi
	if [ "$(status_of configure)" = pass ]; then
		targets=(server/moeserve)
		[ $TESTS = enabled ] && targets+=(tests/engine/test-rocm)
		step build $BUILD_CAP $KEEP_BUILD ninja -C "$BUILD" "${targets[@]}" && BUILT=1
	else
		skip build "configure failed"
	fi
else
	skip configure "missing dependencies"
	skip build "missing dependencies"
fi

# kernels: every comparison of tests/engine/test-rocm.c on the device
if [ $BUILT = 1 ] && [ $TESTS = enabled ]; then
	step kernels 90 $((KEEP_BENCH + 2 * KEEP_GOLDEN)) env MOESERVE_TEST_BACKEND=$BACKEND \
		"$BUILD/tests/engine/test-rocm"
elif [ $BUILT = 1 ]; then
	skip kernels "Check (libcheck, Debian check) is missing: tests/engine/test-rocm was not built"
else
	skip kernels "no build"
fi

# golden: the whole model on the device against the numpy reference
if [ $BUILT = 1 ]; then
	step golden 120 $((KEEP_BENCH + KEEP_GOLDEN)) env MOESERVE_BACKEND=$BACKEND MOESERVE_EXACT=1 "$PY" tests/e2e/golden.py \
		--moeserve "$MOESERVE" --workdir "$TMPD/golden" --timeout 60 "${GOLDEN_PRESETS[@]}"
	step quant-golden 120 $KEEP_BENCH env MOESERVE_BACKEND=$BACKEND MOESERVE_EXACT=1 "$PY" \
		tests/quant/quant_golden.py --moeserve "$MOESERVE" --workdir "$TMPD/quant-golden" --timeout 60 \
		"${QUANT_PRESETS[@]}"
else
	skip golden "no build"
	skip quant-golden "no build"
fi

# bench: the issue-7 checkpoint in both formats, one JSON line each
for fmt in mxfp4 quark; do
	keep=$([ $fmt = mxfp4 ] && echo $((KEEP_BENCH / 2)) || echo 0)
	if [ -z "${PY:-}" ]; then
		skip "ckpt-$fmt" "no python3 with numpy"
		skip "bench-$fmt" "no checkpoint"
		continue
	fi
	if ! bg_wait "ckpt-$fmt" "$((keep + KEEP_BENCH / 4))"; then
		skip "bench-$fmt" "no checkpoint"
		continue
	fi
	if [ $BUILT = 0 ]; then
		skip "bench-$fmt" "no build"
		continue
	fi
	step "bench-$fmt" 120 "$keep" sh -c '"$@" >"$0" 2>&1; rc=$?; cat "$0"; exit $rc' \
		"$TMPD/bench-$fmt.txt" "$MOESERVE" bench --backend $BACKEND --model "$TMPD/bench-$fmt" \
		"${BENCH_ARGS[@]}"
	cp "$TMPD/bench-$fmt.txt" "$OUT_DIR/bench-$fmt.txt" 2>/dev/null
	grep '^{' "$TMPD/bench-$fmt.txt" 2>/dev/null | tail -n 1 >"$TMPD/bench-$fmt.json"
	write_summary
done

write_summary
bad=$(awk -F'\t' '$2 != "pass"' "$STEPS" | wc -l)
log "run.sh: $(awk -F'\t' '$2 == "pass"' "$STEPS" | wc -l) steps passed, $bad not," \
	"$(($(date +%s) - START)) s; summary in $SUMMARY"
[ "$bad" = 0 ]
