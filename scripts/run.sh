#!/usr/bin/env bash
# README command 1: install what is missing, build the daemon, describe the
# embedded default model, generate once, then serve the OpenAI API on it.
# Extra arguments go to `moeserve serve` (e.g. --model DIR --port 9000).
set -uo pipefail
cd "$(dirname "$0")/.."

die() { echo "run.sh: $*" >&2; exit 1; }

scripts/install-deps.sh || die "installing the build's packages failed (scripts/install-deps.sh, above)"
if [ ! -f build/build.ninja ]; then
  rm -rf build
  meson setup build || die "configuring failed (meson setup build, above)"
fi
# Only the daemon: the default target also compiles the test programs, and the
# tests build their own fixtures when they run (scripts/test.sh).
echo "run.sh: building build/server/moeserve (ninja)" >&2
ninja -C build server/moeserve || die "building the daemon failed (ninja -C build server/moeserve, above)"
./build/server/moeserve inspect || die "moeserve inspect failed (above)"
./build/server/moeserve generate --prompt "And the LORD said unto Moses" --max-tokens 32 ||
  die "moeserve generate failed (above)"
# The daemon: the OpenAI API on http://127.0.0.1:8080 until Ctrl-C or SIGTERM.
exec ./build/server/moeserve serve "$@"
