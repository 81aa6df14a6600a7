#!/usr/bin/env bash
# Training runs on a GPU machine (the device tool lends one to some sessions, 10 minutes a call):
# trains speller candidates side by side on the one GPU, detached from the call (setsid), so one
# run can outlast a call; evaluates each there and returns the two best.
#
#   gpu_run.sh start DATA MINUTES [INIT_DIR]   start the candidates' training in the background
#   gpu_run.sh snapshot OUT_DIR                each candidate's latest export (every 2 minutes), as below
#   gpu_run.sh collect OUT_DIR                 wait for the training, evaluate, keep the two best
#
# DATA holds corpus.json (build_data.py), dev_words.tsv (misspelled<TAB>correct) and one folder per
# tokenizer (unigram/, char/) with the spiece.model trained on the CPU by train.py, so the GPU run
# needs no Debian packages (its python3 has torch and sentencepiece). INIT_DIR (optional) holds
# exported models named like the candidates (INIT_DIR/<name>/) to continue from, fresh optimizer.
# CANDIDATES (optional) lists "name tokenizer extra-train-flags" lines.
#
# OUT_DIR gets figures.tgz (logs, eval figures, and each kept model's config.json and spiece.model
# under <name>/) and <name>.safetensors.part-NN, its model.safetensors in 12 MiB parts (the device
# tool returns at most 8 files of at most 16 MiB): rejoin with `cat NAME.safetensors.part-* >
# model.safetensors`. The best: top-1 on the real misspellings among those that leave >= 99% of
# clean words unchanged, then the rest by top-1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
device=${DEVICE:-cuda}  # DEVICE=cpu: a smoke test of this script on a machine without a GPU
work=/tmp/speller-gpu
logs=$work/figures

start() {
  local data minutes init
  data=$(cd "${1:?DATA}" && pwd)
  minutes=${2:?MINUTES}
  init=${3:+$(cd "$3" && pwd)}
  rm -rf "$work"
  mkdir -p "$logs"
  ln -s "$data" "$work/data"
  if [ "$device" != cpu ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$logs/gpu.txt"
  fi
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' >>"$logs/gpu.txt"
  cat "$logs/gpu.txt"
  local candidates=${CANDIDATES:-"unigram-base unigram --lr 2e-3
char-base char --lr 2e-3"}
  local name tok flags from
  while read -r name tok flags; do
    [ -n "$name" ] || continue
    mkdir -p "$work/$name"
    ln -s "$data/corpus.json" "$work/$name/corpus.json"
    cp "$data/$tok/spiece.model" "$work/$name/"
    from=()
    if [ -n "$init" ] && [ -d "$init/$name" ]; then from=(--init "$init/$name"); fi
    # shellcheck disable=SC2086  # flags are words
    setsid "$py" "$here/train.py" --work "$work/$name" --device "$device" --workers "${WORKERS:-4}" \
      --size base --tokenizer "$tok" --batch 1024 --micro 2 --warmup 300 --position-prior --bias-lr-mult 4 \
      --save-minutes 2 --max-minutes "$minutes" "${from[@]}" $flags \
      >"$logs/train-$name.log" 2>&1 </dev/null &
    echo "$!" >"$work/$name/pid"
  done <<<"$candidates"
}

names() {
  local d
  for d in "$work"/*/pid; do basename "$(dirname "$d")"; done
}

# keep OUT NAME...: the named candidates' exports into OUT (config/spiece in the figures, weights split)
keep() {
  local out=$1 name exp
  shift
  for name in "$@"; do
    exp=$work/$name/export
    [ -f "$exp/model.safetensors" ] || continue
    mkdir -p "$logs/$name"
    cp "$exp/config.json" "$exp/spiece.model" "$logs/$name/"
    rm -f "$out/$name".safetensors.part-*
    split -b 12M -d "$exp/model.safetensors" "$out/$name.safetensors.part-"
  done
  tar czf "$out/figures.tgz" -C "$logs" .
}

snapshot() {
  local out=${1:?OUT_DIR}
  mkdir -p "$out"
  local name
  for name in $(names); do tail -n 2 "$logs/train-$name.log"; done
  mapfile -t all < <(names)
  keep "$out" "${all[@]:0:2}"
}

collect() {
  local out=${1:?OUT_DIR}
  mkdir -p "$out"
  local name
  for name in $(names); do
    while kill -0 "$(cat "$work/$name/pid")" 2>/dev/null; do sleep 2; done
    tail -n 1 "$logs/train-$name.log"
  done
  [ "$device" = cpu ] || nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >>"$logs/gpu.txt" || true
  for name in $(names); do
    timeout 150 "$py" "$here/eval.py" --model "$work/$name/export" --work "$work/$name" --device "$device" \
      --batch 512 --tsv "$work/data/dev_words.tsv" --examples 40 --json "$logs/eval-$name.json" \
      >"$logs/eval-$name.log" 2>&1 &
  done
  wait || true
  mapfile -t best < <("$py" - "$logs" $(names) <<'PY'
import json, os, sys
logs, names = sys.argv[1], sys.argv[2:]
scores = []
for name in names:
    try:
        with open(os.path.join(logs, f"eval-{name}.json")) as f:
            e = json.load(f)
    except OSError:  # not evaluated (see its log)
        scores.append(((False, -1.0), name))
        continue
    scores.append(((e["clean_words_unchanged"] >= 0.99, e["tsv_top1"]), name))
    print(name, "top1", e["tsv_top1"], "clean", e["clean_words_unchanged"], "synthetic",
          e["synthetic_word_accuracy"], file=sys.stderr)
for _, name in sorted(scores, reverse=True)[:2]:
    print(name)
PY
  )
  echo "kept: ${best[*]}"
  keep "$out" "${best[@]}"
}

cmd=${1:?usage: gpu_run.sh start DATA MINUTES [INIT_DIR] | snapshot OUT_DIR | collect OUT_DIR}
shift
case "$cmd" in
  start | snapshot | collect) "$cmd" "$@" ;;
  *) echo "gpu_run.sh: unknown command $cmd" >&2; exit 2 ;;
esac
