#!/bin/bash
# The pipeline at concurrency 1 against the engine alone, side by side, in rounds: per round the
# engine's batch-1 generate median (engine_bench, int8, one thread per core, as the library's
# default OpenMP waits and with OMP_WAIT_POLICY=passive) and the pipeline's p50 / p99 with its
# per-stage means (seqpipe-bench against a private `seqpipe up`, 4-word inputs, exactly 11 new
# tokens, response cache off), then the ratio. The machine is shared: compare within a round.
#
#   bench/slo_side_by_side.sh MODEL_DIR [ROUNDS] [--set key=value ...]
#   seqpipe-mkmodel --preset t5-small --seed 0 --spiece --out /tmp/t5-small   # a model to use
# Environment: B (build dir, default build/release), CONFIG (default config/pipeline.yaml),
# SEQPIPE (the seqpipe binary the pipeline runs; default the build's), DURATION (s, default 6).
set -euo pipefail
model=${1:?usage: slo_side_by_side.sh MODEL_DIR [ROUNDS] [--set key=value ...]}
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
B=${B:-build/release}
CONFIG=${CONFIG:-config/pipeline.yaml}
SEQPIPE=${SEQPIPE:-$B/tools/seqpipe}
cores=$(nproc)

engine_median() {  # prints the batch-1 generate median, ms
  "$B/bench/engine_bench" --model "$model" --threads "$cores" --runs 30 --quick \
    --compute-type int8 2>/dev/null | awk '/^generate +median/ {print $3; exit}'
}
pipeline_line() {  # prints "p50 p99 | queue tokenize b.wait encode decode postprocess overhead"
  "$B/bench/seqpipe-bench" sweep --model "$model" --config "$CONFIG" --seqpipe "$SEQPIPE" \
    --grid "model.compute_type=int8" --set gateway.cache_bytes=0 "$@" --words 4:4 \
    --min-new-tokens 11 --max-new-tokens 11 --concurrency-range 1:1 --min-gain -1 \
    --duration "${DURATION:-6}" --slo-p99-ms 100000 2>/dev/null |
    awk '/^concurrency 1 / {print $6, $9, "|", $13, $14, $15, $16, $17, $18, $19; exit}'
}

printf "%-5s %-6s %-9s %-9s %-9s %-9s %-7s %s\n" round load engine engine_pas pipe_p50 pipe_p99 ratio \
  "stages: queue tokenize b.wait encode decode postprocess overhead (ms)"
for r in $(seq 1 "$rounds"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  engine=$(engine_median)
  passive=$(OMP_WAIT_POLICY=passive engine_median)
  read -r p50 p99 stages < <(pipeline_line "$@")
  ratio=$(awk -v p="$p50" -v e="$engine" 'BEGIN {printf "%.2f", p / e}')
  printf "%-5s %-6s %-9s %-9s %-9s %-9s %-7s %s\n" "$r" "$load" "$engine" "$passive" "$p50" "$p99" \
    "$ratio" "$stages"
done
