#!/usr/bin/env bash
# README command 1: install what is missing, build, and run moeserve on the
# embedded default model (a greedy generation; the HTTP server comes later).
# Extra arguments go to `moeserve generate` (e.g. --model DIR --tokens 1,2,3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
./build/server/moeserve inspect
if [ $# -eq 0 ]; then
  set -- --tokens 1,2,3,4,5,6,7,8 --max-tokens 16
fi
exec ./build/server/moeserve generate "$@"
