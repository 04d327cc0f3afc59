#!/usr/bin/env bash
# tests/grammar/grammar_ajv.sh: every sentence of every schema's grammar validates.
# `test-grammar --generate N` writes random sentences of the grammar of each
# schema in tests/grammar/structured_schemas.json (and mutations of them that the
# grammar accepts) as requests; tests/clients/json_validate.mjs answers each with
# ajv + ajv-formats; any answer but ok fails the test, printed with its
# request.
#
#   tests/grammar/grammar_ajv.sh TEST_GRAMMAR NPM_CI AJV_DIR NODE JSON_VALIDATE [N]
set -uo pipefail

gen=$1 npm_ci=$2 ajv_dir=$3 node=$4 validate=$5 n=${6:-24}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$gen" --generate "$n" >"$work/requests.jsonl" || { echo "grammar-ajv: test-grammar --generate failed" >&2; exit 1; }
bash "$npm_ci" "$ajv_dir" -- "$node" "$validate" <"$work/requests.jsonl" >"$work/answers.jsonl" ||
  { echo "grammar-ajv: json_validate.mjs failed" >&2; exit 1; }

asked=$(grep -c . "$work/requests.jsonl")
answered=$(grep -c . "$work/answers.jsonl")
ok=$(grep -c '^{"ok":true}$' "$work/answers.jsonl")
echo "grammar-ajv: $asked sentences, $answered answered, $ok valid"
[ "$asked" -gt 0 ] && [ "$asked" -eq "$answered" ] && [ "$ok" -eq "$asked" ] && exit 0
# the failures, each with its request
grep -vn '^{"ok":true}$' "$work/answers.jsonl" | head -20 | while IFS=: read -r line rest; do
  echo "--- $rest"
  sed -n "${line}p" "$work/requests.jsonl" | cut -c1-2000
done
exit 1
