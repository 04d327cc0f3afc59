#!/usr/bin/env bash
# tests/common/with-fixtures.sh: build the fixtures a test needs, then run the test.
#
#   tests/common/with-fixtures.sh NINJA BUILDDIR FIXTURE... -- COMMAND [ARGS...]
#
# FIXTURE is a custom target's output (absolute, or relative to BUILDDIR).
# Why a wrapper: meson before 1.7 puts every target a test() names into the
# default target, so plain `ninja` would build the generated checkpoints and
# the node-built tokenizer (and need npm) although only the tests use them.
# Tests name their fixtures here instead; ninja builds what is missing or
# stale, one test at a time (a lock: meson runs tests in parallel, and two
# ninjas must not share a build directory).
set -uo pipefail

if [ $# -lt 4 ]; then
  echo "usage: $0 NINJA BUILDDIR FIXTURE... -- COMMAND [ARGS...]" >&2
  exit 2
fi
ninja=$1 build=$2
shift 2
targets=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  targets+=("${1#"$build"/}")
  shift
done
[ "${1:-}" = -- ] && [ $# -ge 2 ] || { echo "$0: no '-- COMMAND' given" >&2; exit 2; }
shift

if ! (flock 9 && "$ninja" -C "$build" --quiet "${targets[@]}") 9>"$build/.fixtures.lock" >&2; then
  echo "with-fixtures: building ${targets[*]} in $build failed (errors above)" >&2
  exit 1
fi
exec "$@"
