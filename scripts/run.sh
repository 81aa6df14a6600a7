#!/usr/bin/env bash
# The main job: install the Debian packages, build (Release), start the whole pipeline (gateway,
# tokenizer, batcher, encoder, decoder, postprocessor: `seqpipe up`) on this machine, send it a
# request through the gateway socket as a client does, print the reply, and stop the pipeline.
#   scripts/run.sh ["text" ...]
# The model is models/speller-t5 when it is there; otherwise a random checkpoint with t5-small's
# layers (build/models/t5-small-random-v500: the reply's text is noise, the path and timings are real).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
B=build/release/tools

model=models/speller-t5
if [ ! -f "$model/model.safetensors" ]; then
  model=build/models/t5-small-random-v500
  if [ ! -f "$model/model.safetensors" ]; then
    # t5-small's layers with a 500-piece vocabulary, the size of the SentencePiece model --spiece
    # trains, so the (random) output ids decode to words; --untied: with random weights a tied
    # model only echoes its start token.
    $B/seqpipe-mkmodel --preset t5-small --vocab-size 500 --untied --seed 0 --spiece --out "$model"
  fi
  echo "run.sh: models/speller-t5 is not there; serving $model (random weights: the text is noise)"
fi
[ $# -gt 0 ] || set -- "teh speling"

# config/demo.yaml (the defaults, with the response cache on and the engine in int8; the model's
# own settings come from its seqpipe.yaml, as under plain `seqpipe up`), a private runtime
# directory and ipc:// client socket, metrics on free ports: the demo does not collide with a
# pipeline already running on this machine.
run_dir=$(mktemp -d /tmp/seqpipe-run.XXXXXX)
settings=(--config config/demo.yaml --set "model.dir=$model" --set "runtime_dir=$run_dir" --set "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock"
          --set gateway.metrics_port=0 --set batcher.metrics_port=0)
$B/seqpipe up "${settings[@]}" >"$run_dir/up.log" 2>&1 &
up_pid=$!
cleanup() {
  kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
for _ in $(seq 1 100); do  # ready when a request goes all the way through (up to ~20 s)
  if $B/seqpipe send "${settings[@]}" --timeout-ms 500 --max-new-tokens 2 "warm up" >/dev/null 2>&1; then break; fi
  kill -0 "$up_pid" 2>/dev/null || { cat "$run_dir/up.log"; echo "run.sh: the pipeline exited" >&2; exit 1; }
  sleep 0.2
done
echo "run.sh: pipeline up ($model); seqpipe send $*"
# Beam search with 2 beams: with the speller's word lists and noisy channel (its seqpipe.yaml), the postprocessor
# weighs both hypotheses, Aspell's suggestions and word counts (models/speller-t5/MODEL_CARD.md:
# 87.68% top-1 on dev_words' real misspellings as served, 640 requests/s at p99 45 ms).
$B/seqpipe send "${settings[@]}" --timeout-ms 5000 --num-beams 2 "$@"
