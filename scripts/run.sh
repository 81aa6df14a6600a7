#!/usr/bin/env bash
# The main job: install the Debian packages, build (Release), and serve a sample request.
# Today that is the T5 engine on a t5-small-shaped checkpoint: the ZeroMQ pipeline and the
# bundled speller model are later issues; when they land this script starts them instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"

model=build/models/t5-small-random-v500
if [ ! -f "$model/model.safetensors" ]; then
  # t5-small's layers with a 500-piece vocabulary, the size of the SentencePiece model --spiece
  # trains, so the (random) output ids decode to words; --untied: with random weights a tied
  # model only echoes its start token.
  build/release/tools/seqpipe-mkmodel --preset t5-small --vocab-size 500 --untied --seed 0 --spiece --out "$model"
fi
text=${1:-"teh speling"}
echo "seqpipe-generate on $model (random weights: the output text is noise, the timings are real)"
build/release/tools/seqpipe-generate --model "$model" --text "$text" --max-new-tokens 11 --threads "$(nproc)"
