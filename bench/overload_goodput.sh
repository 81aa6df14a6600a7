#!/bin/sh
# Goodput under overload (docs/PERFORMANCE.md, "Overload (goodput)"): a private pipeline on a
# tiny random model with the defaults (one replica a stage on this machine), its capacity
# measured closed-loop, then open loop at twice that capacity; every request's deadline is
# DEADLINE_MS (its timeout_ms, as a client's X-Request-Timeout would set it). Prints each run's
# table, the share of capacity answered ok, the refusals' latency and the hubs' RSS before and
# after.
#   bench/overload_goodput.sh [BUILD_DIR] [DEADLINE_MS] [SECONDS] [TOKENS]
set -eu
B=${1:-build/release} DEADLINE=${2:-10000} SECS=${3:-60} TOKENS=${4:-32}
DIR=$(mktemp -d /tmp/seqpipe-goodput-XXXXXX)
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$DIR"' EXIT
"$B/tools/seqpipe-mkmodel" --preset tiny --spiece --seed 3 --out "$DIR/model" >/dev/null
SETS="model.dir=$DIR/model runtime_dir=$DIR/run gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock
gateway.http_endpoint= gateway.metrics_port=0 batcher.metrics_port=0 tokenizer.metrics_port=0
encoder.metrics_port=0 decoder.metrics_port=0 postprocessor.metrics_port=0"
ARGS=""
for s in $SETS; do ARGS="$ARGS --set $s"; done
# shellcheck disable=SC2086
"$B/tools/seqpipe" up $ARGS >"$DIR/up.log" 2>&1 &
UP=$!
BENCH="${SEQPIPE_BENCH:-$B/bench/seqpipe-bench} --endpoint ipc://$DIR/run/gateway.sock --no-progress
  --min-new-tokens $TOKENS --max-new-tokens $TOKENS --timeout-ms $DEADLINE"
for _ in $(seq 60); do $BENCH --requests 1 --concurrency 1 >/dev/null 2>&1 && break; sleep 1; done
rss() { ps -o rss=,comm= -p "$(pgrep -d, -f "$DIR/run")" | awk '$2 ~ /gateway|batcher/ {printf "%s %.1f MB  ", $2, $1/1024}'; }
$BENCH --concurrency 64 --duration 10 --json "$DIR/capacity.json" | tail -3
CAP=$(python3 -c "import json; print(json.load(open('$DIR/capacity.json'))['overall']['throughput_per_s'])")
RATE=$(python3 -c "print(round(2 * $CAP))")
echo "capacity $CAP ok/s; offering $RATE/s for $SECS s, deadline $DEADLINE ms"
BEFORE=$(rss)
$BENCH --request-rate "$RATE" --duration "$SECS" --window-s 10 --json "$DIR/overload.json" | tail -12
echo "RSS before: $BEFORE"
echo "RSS after:  $(rss)"
python3 - "$DIR/overload.json" "$CAP" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["overall"]
cap = float(sys.argv[2])
none = {"p50": 0, "p99": 0, "max": 0}
e = run.get("error_latency_us", none)
r = run.get("refusal_latency_us", none)
print(f"goodput {run['throughput_per_s']:.1f} ok/s = {100 * run['throughput_per_s'] / cap:.1f}% of "
      f"capacity; errors {run['errors_by_code']}; refusals (overloaded) p50 {r['p50'] / 1e3:.2f} ms, "
      f"p99 {r['p99'] / 1e3:.2f} ms, max {r['max'] / 1e3:.2f} ms; every error p50 {e['p50'] / 1e3:.2f} ms, "
      f"p99 {e['p99'] / 1e3:.2f} ms, max {e['max'] / 1e3:.2f} ms")
PY
