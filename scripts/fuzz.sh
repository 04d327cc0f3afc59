#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz for as long as asked (hours, or a
# number of executions), with a corpus that grows from run to run outside
# the repository (build-fuzz/corpus/<target>/; the seeds under
# tests/fuzz/corpus/ are only read). Builds build-fuzz with clang first.
#
#   scripts/fuzz.sh [--time S | --runs N] [--jobs J] [--keep-going] [--list] [TARGET...]
#
# --time S     seconds per target (default 3600)
# --runs N     executions per target instead (one process; with --jobs > 1
#              libFuzzer's fork mode stops once N executions are done)
# --jobs J     worker processes per target (default 1; at most the cores)
# --keep-going with --jobs > 1: record crashes and go on
# TARGET       names as in tests/fuzz/meson.build (req-chat, grammar, ...);
#              none: all of them, one after another
#
# --ledger     print the ledger's totals per target and stop
#
# Prints per target: executions, executions/s, coverage (edges), corpus
# size and crashes with their reproducer paths (build-fuzz/fuzz-runs/
# <target>/artifacts/); then a table of all. Exit 1 when any target crashed.
# Every run adds a line to build-fuzz/fuzz-runs/ledger.tsv (time, target,
# executions, crashes, seconds, commit): the corpus carries over from run
# to run, so a target's executions are the sum of its runs.
set -uo pipefail
cd "$(dirname "$0")/.."
time_s=3600 runs=-1 jobs=1 keep=() list=0 targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --time) time_s=$2; shift 2 ;;
    --runs) runs=$2; time_s=$((30 * 24 * 3600)); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --keep-going) keep=(--keep-going); shift ;;
    --list) list=1; shift ;;
    --ledger) list=2; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=$(sed -n "s/^  '\([a-z0-9-]*\)': \['fuzz-.*/\1/p" tests/fuzz/meson.build)
if [ "$list" -eq 1 ]; then echo "$all"; exit 0; fi
ledger=build-fuzz/fuzz-runs/ledger.tsv
if [ "$list" -eq 2 ]; then
  [ -f "$ledger" ] || { echo "fuzz.sh: no ledger yet ($ledger)" >&2; exit 1; }
  printf '%-20s %14s %8s %8s %5s\n' target executions crashes hours runs
  awk -F'\t' '{ e[$2] += $3; c[$2] += $4; s[$2] += $5; r[$2]++ }
    END { for (t in e) printf "%-20s %14d %8d %8.2f %5d\n", t, e[t], c[t], s[t] / 3600, r[t] }' \
    "$ledger" | sort
  exit 0
fi
[ ${#targets[@]} -eq 0 ] && read -r -d '' -a targets <<<"$all"
for t in "${targets[@]}"; do
  grep -qx "$t" <<<"$all" || { echo "fuzz.sh: no target $t (known: $(echo $all))" >&2; exit 64; }
done
command -v clang >/dev/null || { echo "fuzz.sh: clang is missing (apt-get install clang)" >&2; exit 69; }
dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang meson setup "$dir" -Dfuzz=enabled -Dtests=disabled -Drocm=disabled || exit 1
fi
ninja -C "$dir" fuzz || { echo "fuzz.sh: build failed (above)" >&2; exit 1; }
max_len() { sed -n "s/^  '$1': \['[^']*', \([0-9]*\)\],/\1/p" tests/fuzz/meson.build; }
summary=() failed=0
for t in "${targets[@]}"; do
  echo "=== $t: $([ "$runs" -ge 0 ] && echo "$runs executions" || echo "$time_s s"), $jobs job(s)"
  # the growing corpus lives in build-fuzz/corpus/<target> (kept between runs)
  t0=$(date +%s)
  line=$(bash tests/fuzz/run-target.sh --exe "$dir/tests/fuzz/fuzz-$t" --seeds tests/fuzz/corpus/$t \
        --work "$(pwd)/$dir/fuzz-runs/$t" --corpus "$(pwd)/$dir/corpus/$t" --seconds "$time_s" \
        --runs "$runs" --jobs "$jobs" --max-len "$(max_len "$t")" "${keep[@]}")
  rc=$?  # (the failure's details went to stderr, shown as they came)
  echo "$line"
  summary+=("$line")
  execs=$(sed -nE 's/^fuzz [^:]*: ([0-9]+) executions.*/\1/p' <<<"$line")
  crashes=$(sed -nE 's/.* crashes ([0-9]+).*/\1/p' <<<"$line")
  mkdir -p "$(dirname "$ledger")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "${execs:-0}" "${crashes:-0}" \
    "$(( $(date +%s) - t0 ))" "$(git rev-parse --short HEAD 2>/dev/null || echo -)" >>"$ledger"
  [ $rc -ne 0 ] && failed=$((failed + 1))
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
[ "$failed" -eq 0 ]
