#!/usr/bin/env bash
# One libFuzzer target for a bounded time or number of runs, over its seed
# corpus and a working corpus that grows (new inputs go there, never into
# the repository's seeds). Prints one summary line:
#   fuzz NAME: N executions (R/s), coverage C, corpus K inputs, crashes X [artifact paths]
# and exits 1 when the target crashed, leaked, hit UB, ran out of memory or
# timed out on an input (the reproducer's path is printed), 0 otherwise.
#
#   run-target.sh --exe BIN --seeds DIR --work DIR [--corpus DIR] [--seconds S] [--runs N]
#                 [--jobs J] [--max-len B] [--dict FILE] [--keep-going]
# --corpus: the growing corpus (default WORK/corpus); --jobs J > 1 runs libFuzzer's fork mode (J worker processes);
# --keep-going (fork mode) records crashes and goes on (-ignore_crashes).
set -uo pipefail
exe= seeds= work= corpus= seconds=20 runs=-1 jobs=1 max_len= dict= keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --exe) exe=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --max-len) max_len=$2; shift 2 ;;
    --dict) dict=$2; shift 2 ;;
    --keep-going) keep=1; shift ;;
    *) echo "run-target.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done
[ -x "$exe" ] && [ -d "$seeds" ] && [ -n "$work" ] ||
  { echo "run-target.sh: --exe BIN --seeds DIR --work DIR are needed ($exe, $seeds)" >&2; exit 64; }
mkdir -p "$work"
# libFuzzer runs in the work folder (fork mode's files): absolute paths
exe=$(realpath "$exe") seeds=$(realpath "$seeds") work=$(realpath "$work")
[ -n "$corpus" ] && { mkdir -p "$corpus"; corpus=$(realpath "$corpus"); }
name=$(basename "$exe"); name=${name#fuzz-}
# the target's dictionary, when it has one
here=$(cd "$(dirname "$0")" && pwd)
[ -z "$dict" ] && [ -f "$here/dict/$name.dict" ] && dict=$here/dict/$name.dict
corpus=${corpus:-$work/corpus}
mkdir -p "$corpus" "$work/artifacts"
log=$work/fuzz.log
args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
      -artifact_prefix="$work/artifacts/" -detect_leaks=1)
[ "$runs" -ge 0 ] && args+=(-runs="$runs")
[ -n "$max_len" ] && args+=(-max_len="$max_len")
[ -n "$dict" ] && args+=(-dict="$dict")
if [ "$jobs" -gt 1 ]; then
  args+=(-fork="$jobs")
  [ "$keep" -eq 1 ] && args+=(-ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
# UB must stop the run (the build already says so; this covers a build
# without it) and leaks are failures; the options of a surrounding ASan
# run (test.sh's abort_on_error) would hide libFuzzer's reproducer.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:symbolize=1
before=$(ls "$work/artifacts" | wc -l)
( cd "$work" && "$exe" "${args[@]}" "$corpus" "$seeds" ) >"$log" 2>&1
rc=$?
# executions: the final stats (one process), else fork mode's last "#N:" line
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
if [ "$jobs" -gt 1 ]; then
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
  rate=$(sed -nE 's/.*exec\/s ([0-9]+).*/\1/p' <<<"$last")
  crashes_fork=$(sed -nE 's/.*oom\/timeout\/crash: ([0-9]+\/[0-9]+\/[0-9]+).*/\1/p' <<<"$last")
fi
n_corpus=$(ls "$corpus" | wc -l)
# new artifacts: crash-, leak-, timeout-, oom- (failures) and slow-unit-
# (an input over 10 s: reported, not a failure)
new=$(( $(ls "$work/artifacts" | wc -l) - before ))
arts=$(ls -t "$work/artifacts" | head -n "$new" | grep -v '^slow-unit-' | sed "s|^|$work/artifacts/|" | tr '\n' ' ')
slow=$(ls -t "$work/artifacts" | head -n "$new" | grep -c '^slow-unit-')
bad=$(wc -w <<<"$arts")
extra=
[ "$slow" -gt 0 ] && extra=" (slow inputs over 10 s: $slow, in $work/artifacts)"
echo "fuzz $name: ${execs:-?} executions (${rate:-?}/s), coverage ${cov:-?}, corpus $n_corpus inputs," \
     "crashes $bad${crashes_fork:+ (oom/timeout/crash $crashes_fork)}${arts:+: $arts}$extra"
if [ "$rc" -ne 0 ] || [ "$bad" -gt 0 ]; then
  echo "fuzz $name: FAILED (exit $rc); the log: $log" >&2
  grep -E 'ERROR: |SUMMARY: |runtime error|^fuzz: |Test unit written' "$log" | head -20 >&2
  for a in $arts; do echo "reproduce: $exe $a" >&2; done
  exit 1
fi
exit 0
