#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + libFuzzer; the decoders are compiled
# into each target so they are instrumented) and runs each for a bounded time from a seed corpus
# of valid messages. Usage: run_fuzz.sh SOURCE_DIR BUILD_DIR [RUNS [SECONDS]]
# CI runs a fixed number of inputs from a fixed seed and a fresh corpus, so a run is
# reproducible; for longer exploratory runs give more RUNS (or use the targets directly). Each
# target also stops after SECONDS (default 150): on a machine busy with builds the inputs take
# several times longer, and the test's time limit must hold all the same.
set -euo pipefail
src=$1 out=$2/fuzz runs=${3:-200000} seconds=${4:-150}
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -I"$src/engine/include" -I"$src/services")
for library in generation protocol messages observability config transport; do
  flags+=(-I"$src/common/$library/include")
done
build() {  # target sources...
  local target=$1
  shift
  if [ ! -x "$out/$target" ] || [ -n "$(find "$@" -newer "$out/$target" 2>/dev/null)" ]; then
    clang++ "${flags[@]}" "$@" -lyaml-cpp -o "$out/$target"  # yaml-cpp: the config's sources
  fi
}
build request_fuzz "$src/tests/fuzz/request_fuzz.cc" "$src/common/protocol/src/protocol.cc" \
  "$src/common/protocol/src/msgpack_io.cc" "$src/common/protocol/src/generate_options.cc" "$src/common/protocol/src/codec.cc" "$src/common/protocol/src/reply.cc"
build http_json_fuzz "$src/tests/fuzz/http_json_fuzz.cc" "$src/services/gateway/http_json.cc" \
  "$src/services/gateway/json_request.cc" "$src/services/gateway/http_openai.cc" "$src/services/gateway/http_tgi.cc" \
  "$src/common/config/src/model_repository.cc" "$src/common/config/src/config_load.cc" \
  "$src/common/config/src/config_check.cc" "$src/common/config/src/config_runtime.cc" \
  "$src/common/protocol/src/protocol.cc" "$src/common/protocol/src/msgpack_io.cc" "$src/common/protocol/src/generate_options.cc" "$src/common/protocol/src/codec.cc" "$src/common/protocol/src/reply.cc"
build stage_message_fuzz "$src/tests/fuzz/stage_message_fuzz.cc" \
  "$src/common/messages/src/stage_messages.cc" "$src/common/messages/src/stage_messages_write.cc" "$src/common/protocol/src/protocol.cc" \
  "$src/common/protocol/src/msgpack_io.cc" "$src/common/protocol/src/generate_options.cc" "$src/common/protocol/src/codec.cc" "$src/common/protocol/src/reply.cc" "$src/common/observability/src/status.cc" \
  "$src/common/messages/src/clock.cc"

# Seeds: valid messages written with python3-msgpack (a fuzzer starting from nothing spends its
# time discovering the msgpack map header).
corpus_req=$out/corpus-request corpus_stage=$out/corpus-stage corpus_http=$out/corpus-http
rm -rf "$corpus_req" "$corpus_stage" "$corpus_http"
mkdir -p "$corpus_req" "$corpus_stage" "$corpus_http"
printf '%s' '{"id": "a", "text": "teh speling", "params": {"max_new_tokens": 8}, "timeout_ms": 500}' \
  >"$corpus_http/seed0"
printf '%s' '{"id": "s", "text": "teh speling", "stream": true}' >"$corpus_http/seed2"
printf '%s' '{"id": "k", "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES",
  "data": [["a"], ["b"]]}], "parameters": {"num_beams": 2, "timeout_ms": 100}}' >"$corpus_http/seed1"
printf '%s' '{"model": "m", "prompt": ["a", "b"], "max_tokens": 8, "temperature": 0.7, "top_p": 0.9,
  "seed": 1, "stop": ".", "n": 1, "stream": false}' >"$corpus_http/seed3"
printf '%s' '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
  "stream": true}' >"$corpus_http/seed4"
printf '%s' '{"inputs": "teh", "parameters": {"max_new_tokens": 4, "top_k": 5, "stop": ["."],
  "details": false}}' >"$corpus_http/seed5"
/usr/bin/python3 - "$corpus_req" "$corpus_stage" <<'PY'
import msgpack, sys
req, st = sys.argv[1], sys.argv[2]
seeds = [
    {"v": 1, "text": "teh speling"},
    {"v": 1, "id": "a", "texts": ["x", "y"], "params": {"max_new_tokens": 8, "num_beams": 2, "length_penalty": 0.5,
                                                      "min_new_tokens": 1, "return_scores": True}, "timeout_ms": 500},
    {"v": 1, "id": "r", "status": "ok", "text": "t", "timings_us": {"total": 5}},
    {"v": 1, "id": "s", "text": "teh speling", "stream": True, "params": {"stop": ["."]}},
    {"v": 1, "id": "s", "status": "partial", "text": "the "},
]
for i, s in enumerate(seeds):
    open(f"{req}/seed{i}", "wb").write(msgpack.packb(s, use_single_float=True))
head = {"r": 7, "i": 0, "g": "ipc:///x", "dl": 1, "tm": [0, 0, 0, 0, 0, 0],
        "p": {"max_new_tokens": 8, "num_beams": 1, "length_penalty": 1.0, "min_new_tokens": 0, "return_scores": False}}
stage_seeds = [
    {"kind": "ready", "credits": 1},
    {"kind": "tokenize", "items": [dict(head, t="hi", b="ipc:///b")]},
    {"kind": "sequence", "items": [dict(head, ids=[5, 1])]},
    {"kind": "encoded", "credits": 1, "items": [dict(head, rows=1)]},
    {"kind": "decode", "items": [dict(head, rows=2), dict(head, r=8, rows=1, t="hi")]},
    {"kind": "decoded", "credits": 1, "items": [dict(head, ids=[0, 5, 1], s=-0.5, alt=[[0, 1]])]},
    {"kind": "decoded", "credits": 0, "items": [dict(head, ids=[0, 5], s=0.0, st=True, pt=True)]},
    {"kind": "result", "items": [{"r": 7, "i": 0, "t": "the ", "s": 0.0, "tm": [0, 0, 0, 0, 0, 0],
                                  "pt": True}]},
    {"kind": "result", "items": [{"r": 7, "i": 0, "t": "hi", "s": 0.0, "tm": [0, 0, 0, 0, 0, 0],
                                  "e": {"c": "internal", "m": "x"}}]},
    {"kind": "cancel", "items": [{"r": 7, "g": "ipc:///x", "dl": 1}]},
    {"kind": "heartbeat", "from": "ipc:///x"},
]
for i, seed in enumerate(stage_seeds):
    open(f"{st}/seed{i}", "wb").write(msgpack.packb(dict(seed, v=3), use_single_float=True))
PY
for target in request_fuzz:"$corpus_req" stage_message_fuzz:"$corpus_stage" http_json_fuzz:"$corpus_http"; do
  name=${target%%:*} corpus=${target#*:}
  # Inputs that once failed (tests/fuzz/regressions/<target>-*) must pass first.
  for input in "$src"/tests/fuzz/regressions/"$name"-*; do
    [ -e "$input" ] || continue
    "$out/$name" "$input" > "$out/$name.regression.log" 2>&1 || { tail -30 "$out/$name.regression.log"; exit 1; }
    echo "regression $(basename "$input"): ok"
  done
  echo "== $name: $runs inputs (at most $seconds s)"
  "$out/$name" -seed=1 -runs="$runs" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$out/$name-" "$corpus" > "$out/$name.log" 2>&1 || { tail -40 "$out/$name.log"; exit 1; }
  grep -E "stat::(number_of_executed_units|new_units_added)" "$out/$name.log"
done
