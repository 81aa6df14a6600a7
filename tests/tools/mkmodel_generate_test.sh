#!/usr/bin/env bash
# seqpipe-mkmodel and seqpipe-generate, run as a user runs them: a random model with a tokenizer
# generates from text and from ids, the fixture checkpoint gives HuggingFace's greedy and beam ids,
# and bad usage fails with a message.
# usage: mkmodel_generate_test.sh MKMODEL GENERATE DATA_DIR
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 MKMODEL GENERATE DATA_DIR" >&2
  exit 2
fi
mkmodel=$1
generate=$2
data=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# check_json FILE PYTHON: runs PYTHON (asserts on `j`, the file's JSON object) with python3.
check_json() {
  python3 -c "import json, sys
j = json.load(open(sys.argv[1]))
$2" "$1" || fail "$1: $(cat "$1")"
}

# expect_error RC PATTERN COMMAND...: COMMAND exits with RC and its stderr matches PATTERN.
expect_error() {
  local want_rc=$1 pattern=$2
  shift 2
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [[ $rc -eq $want_rc ]] || fail "exit status $rc, want $want_rc: $* (stderr: $(cat "$work/err"))"
  grep -q -- "$pattern" "$work/err" || fail "stderr lacks '$pattern': $* (stderr: $(cat "$work/err"))"
}

echo "== --help"
"$mkmodel" --help >"$work/help.txt"
grep -q -- "--preset" "$work/help.txt" || fail "mkmodel --help: $(cat "$work/help.txt")"
"$generate" --help >"$work/help.txt"
grep -q -- "--num-beams" "$work/help.txt" || fail "generate --help: $(cat "$work/help.txt")"

echo "== mkmodel tiny --spiece"
"$mkmodel" --preset tiny --spiece --seed 7 --out "$work/tiny"
for f in config.json model.safetensors spiece.model; do
  [[ -s "$work/tiny/$f" ]] || fail "mkmodel wrote no $f"
done
"$mkmodel" --preset tiny --spiece --seed 7 --out "$work/tiny-again" >/dev/null
cmp -s "$work/tiny/model.safetensors" "$work/tiny-again/model.safetensors" || fail "same seed, different weights"
cmp -s "$work/tiny/spiece.model" "$work/tiny-again/spiece.model" || fail "same seed, different spiece.model"
"$mkmodel" --preset tiny --seed 8 --out "$work/tiny-seed8" >/dev/null
if cmp -s "$work/tiny/model.safetensors" "$work/tiny-seed8/model.safetensors"; then
  fail "different seeds, same weights"
fi

echo "== the default model is untied and answers words; --tied echoes its start token"
# As the README's two-model, engine-alone and compose examples make it: a random tied model only
# repeats its start token, so it would answer "".
grep -q '"tie_word_embeddings": false' "$work/tiny/config.json" || fail "default is not untied: $(cat "$work/tiny/config.json")"
"$generate" --model "$work/tiny" --text "hello" --max-new-tokens 8 --json >"$work/default.json"
check_json "$work/default.json" "assert j['text'].strip(), j"
"$mkmodel" --preset tiny --spiece --seed 7 --tied --out "$work/tiny-tied" >/dev/null
grep -q '"tie_word_embeddings": true' "$work/tiny-tied/config.json" || fail "--tied is not tied"
expect_error 2 "--tied and --untied" "$mkmodel" --preset tiny --tied --untied --out "$work/x"

echo "== generate --text"
"$generate" --model "$work/tiny" --text "The train to the coast was late." --max-new-tokens 8 --json \
  >"$work/text.json"
check_json "$work/text.json" "
ids = j['ids']
assert isinstance(ids, list) and all(isinstance(i, int) for i in ids), ids
assert ids[0] == 0 and 2 <= len(ids) <= 9, ids
assert isinstance(j['text'], str), j['text']
assert isinstance(j['score'], (int, float))
assert j['input_ids'][-1] == 1, j['input_ids']
assert set(j['timings_ms']) >= {'load', 'generate'}, j['timings_ms']
assert 'token_logprobs' not in j"

echo "== generate --ids --scores, beam search"
"$generate" --model "$work/tiny" --ids 5,17,42,1 --max-new-tokens 6 --num-beams 3 --scores --json \
  >"$work/ids.json"
check_json "$work/ids.json" "
ids = j['ids']
assert ids[0] == 0 and 2 <= len(ids) <= 7, ids
assert isinstance(j['text'], str), j['text']
assert j['input_ids'] == [5, 17, 42, 1], j['input_ids']
assert len(j['token_logprobs']) == len(ids) - 1, j['token_logprobs']
assert all(p <= 0 for p in j['token_logprobs'])"

echo "== mkmodel --gated --untied --dtype bf16 loads and generates"
"$mkmodel" --preset tiny --gated --untied --dtype bf16 --num-layers 1 --out "$work/v11" >/dev/null
"$generate" --model "$work/v11" --ids 3,4,1 --max-new-tokens 4 --json >"$work/v11.json"
check_json "$work/v11.json" "
assert j['ids'][0] == 0 and len(j['ids']) <= 5, j['ids']
assert j['text'] is None"

echo "== fixture: HuggingFace greedy and beam-4 ids"
fixture="$data/t5v11-tiny-random"
input=467,413,398,67,58,36,434,17,1
"$generate" --model "$fixture" --ids "$input" --max-new-tokens 11 --json >"$work/greedy.json"
check_json "$work/greedy.json" "
assert j['ids'] == [0, 410, 248, 93, 284, 100, 215, 100, 383, 97, 295, 49], j['ids']
assert j['text'] is None"
"$generate" --model "$fixture" --ids "$input" --max-new-tokens 11 --num-beams 4 --json \
  >"$work/beam.json"
check_json "$work/beam.json" "
assert j['ids'] == [0, 410, 503, 284, 100, 215, 100, 383, 97, 295, 21, 256], j['ids']"
"$generate" --model "$fixture" --ids "$input" --max-new-tokens 11 >"$work/plain.txt"
grep -q "0,410,248,93,284,100,215,100,383,97,295,49" "$work/plain.txt" || fail "plain output: $(cat "$work/plain.txt")"

echo "== bad usage"
expect_error 2 "--model" "$generate" --ids 1,2,1
expect_error 2 "exactly one" "$generate" --model "$fixture" --text "hello" --ids 1
expect_error 2 "exactly one" "$generate" --model "$fixture"
expect_error 2 "num_beams" "$generate" --model "$fixture" --ids 1 --num-beams 0
expect_error 2 "--ids" "$generate" --model "$fixture" --text "hello"
expect_error 2 "--ids" "$generate" --model "$fixture" --ids 1,x,2
expect_error 2 "--ids" "$generate" --model "$fixture" --ids -4,1
expect_error 2 "unknown argument" "$generate" --model "$fixture" --ids 1 --beams 2
expect_error 1 "$work/no-such-model: the model directory does not exist" "$generate" --model "$work/no-such-model" --ids 1
# --text looks for spiece.model: a wrong path is still named as that, not as a missing tokenizer.
expect_error 1 "$work/no-such-model: the model directory does not exist" "$generate" --model "$work/no-such-model" --text "hello"
mkdir "$work/empty"
expect_error 1 "$work/empty: no config.json" "$generate" --model "$work/empty" --text "hello"
expect_error 1 "600" "$generate" --model "$fixture" --ids 5,600,1
expect_error 2 "--preset" "$mkmodel" --out "$work/x"
expect_error 2 "--dtype" "$mkmodel" --preset tiny --dtype f8 --out "$work/x"
expect_error 2 "--d-model" "$mkmodel" --preset tiny --d-model 0 --out "$work/x"
[[ ! -e "$work/x" ]] || fail "a refused mkmodel run created its output directory"

echo "PASS"
