#!/usr/bin/env bash
# tools/npm-ci.sh: make DIR's node_modules match DIR/package-lock.json, then
# run COMMAND (the test fixtures that need npm packages run through this).
#
#   tools/npm-ci.sh DIR [-- COMMAND [ARGS...]]
#
# `npm ci` (the npm registry; a few seconds) runs only when node_modules was
# installed from another lockfile or not at all: a copy of the lockfile in
# node_modules records what is there. The lockfile itself is the lock, so
# two fixtures built at once do not install over each other.
set -uo pipefail

dir=${1:?usage: $0 DIR [-- COMMAND [ARGS...]]}
shift
lock=$dir/package-lock.json
stamp=$dir/node_modules/.moeserve-installed-lock.json
[ -f "$lock" ] || { echo "npm-ci: $lock is missing" >&2; exit 1; }
exec 9<"$lock"
flock 9
if ! cmp -s "$lock" "$stamp"; then
  command -v npm >/dev/null 2>&1 || {
    echo "npm-ci: npm is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
  echo "npm-ci: npm ci --prefix $dir" >&2
  npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2 || {
    echo "npm-ci: npm ci --prefix $dir failed (is the npm registry reachable?)" >&2; exit 1; }
  cp "$lock" "$stamp"
fi
exec 9<&-
[ "${1:-}" = -- ] && shift
[ $# -eq 0 ] || exec "$@"
