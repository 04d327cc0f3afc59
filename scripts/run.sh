#!/usr/bin/env bash
# README command 1: install what is missing, build, describe the embedded
# default model, generate once, then serve the OpenAI API on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
./build/server/moeserve inspect
./build/server/moeserve generate --prompt "And the LORD said unto Moses" --max-tokens 32
# The daemon: the OpenAI API on http://127.0.0.1:8080 until Ctrl-C (extra
# arguments go to `moeserve serve`, e.g. --model DIR --port 9000).
exec ./build/server/moeserve serve "$@"
