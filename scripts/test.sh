#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test twice:
# a normal build, then one under AddressSanitizer + UndefinedBehaviorSanitizer;
# then the libFuzzer targets for a bounded time each (a clang build).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || { echo "test.sh: installing the packages failed (above)" >&2; exit 1; }
# npm packages (js-tiktoken, the openai SDK; pinned by their lockfiles) are
# installed by the tests that need them, when they first run.

# UBSan must fail the test, not just print; leaks are failures too.
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1

passed=0 failed=0 skipped=0
count_tests() { # builddir: add its meson testlog to the counts
  local dir=$1
  # Count from meson's machine-readable log, one entry per test.
  local counts
  counts=$(python3 - "$dir/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("result") in ("OK", "EXPECTEDFAIL"):
        ok += 1
    elif r.get("result") == "SKIP":
        skip += 1   # exit 77: what this machine cannot run (an ISA, a container engine)
    else:
        bad += 1
print(ok, bad, skip)
PY
)
  read -r c_ok c_bad c_skip <<<"$counts"
  passed=$((passed + c_ok)); failed=$((failed + c_bad)); skipped=$((skipped + c_skip))
}

run_suite() { # name builddir [meson setup args...]
  local name=$1 dir=$2; shift 2
  echo "=== $name: configure and build ($dir)"
  if [ ! -f "$dir/build.ninja" ]; then
    rm -rf "$dir"
    meson setup "$dir" -Dtests=enabled "$@" ||
      { echo "$name: meson setup failed (above)"; failed=$((failed + 1)); return; }
  else # made by run.sh, or by hand: the tests must be in it
    meson configure "$dir" -Dtests=enabled ||
      { echo "$name: meson configure failed (above)"; failed=$((failed + 1)); return; }
  fi
  if ! ninja -C "$dir"; then
    echo "$name: build failed"; failed=$((failed + 1)); return
  fi
  echo "=== $name: tests"
  meson test -C "$dir" --print-errorlogs --num-processes 2
  count_tests "$dir"
}

run_suite plain build
# optimised (-O2) so the suite stays within CI time; -g keeps the reports readable
run_suite sanitizers build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized

# Third: the libFuzzer targets of tests/fuzz (clang; the parsers with ASan
# and UBSan), each run for -Dfuzz_seconds (20) over its seed corpus, two at a
# time (a crash fails its test and prints the reproducer's path); skipped
# where clang is missing. scripts/fuzz.sh runs them for hours.
run_fuzz_suite() {
  local dir=build-fuzz
  echo "=== fuzz: configure and build ($dir)"
  if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang is missing: skipped"; skipped=$((skipped + 1)); return
  fi
  if [ ! -f "$dir/build.ninja" ]; then
    rm -rf "$dir"
    CC=clang meson setup "$dir" -Dfuzz=enabled -Dtests=disabled -Drocm=disabled ||
      { echo "fuzz: meson setup failed (above)"; failed=$((failed + 1)); return; }
  fi
  # only the targets: the rest of the tree is not built here
  if ! ninja -C "$dir" fuzz; then
    echo "fuzz: build failed"; failed=$((failed + 1)); return
  fi
  echo "=== fuzz: tests"
  meson test -C "$dir" --suite fuzz --no-rebuild --print-errorlogs --num-processes 2
  count_tests "$dir"
}
run_fuzz_suite

echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
