#!/usr/bin/env bash
# Multi-host, simulated: four Linux network namespaces on one bridge stand in for four machines
# on a LAN, each with one veth (eth0):
#   hub    10.77.0.1  seqpipe-gateway + seqpipe-batcher (bind every endpoint on 10.77.0.1)
#   w1     10.77.0.2  one tokenizer, encoder, decoder and postprocessor (connect to 10.77.0.1)
#   w2     10.77.0.3  the same: two replicas of every worker stage, on two machines
#   client 10.77.0.9  `seqpipe status` and `seqpipe send`
# (plus a fifth namespace holding the bridge: the switch). Every process reads the same config
# file, as on real machines (docs/DEPLOY.md), and every socket is CurveZMQ: each machine has its
# own client key pair (`seqpipe keygen`), the hubs admit those four. Checks: every stage has 2 live
# replicas; replies
# sent from the client machine equal seqpipe-generate's on the same model; every worker machine
# did work, seen through its /metrics scraped from the hub machine (metrics.address 0.0.0.0); a
# client key the hubs do not admit gets no reply, and the refusal is counted.
# Everything (processes, namespaces, temp files) is removed on exit.
#
# Usage: netns_test.sh BUILD_DIR     (root, or CAP_NET_ADMIN + CAP_SYS_ADMIN)
# Skips (exit 0 with a message) when `ip netns add` is not permitted here.
set -euo pipefail
build=$(cd "$1" && pwd)
seqpipe=$build/tools/seqpipe
generate=$build/tools/seqpipe-generate
svc() { echo "$build/services/$1/seqpipe-$1"; }

id=sp$$  # namespace names unique to this run
lan=$id-lan hosts=(hub w1 w2 client)
declare -A ip=([hub]=10.77.0.1 [w1]=10.77.0.2 [w2]=10.77.0.3 [client]=10.77.0.9)
tmp=$(mktemp -d)
pids=()
made=()

cleanup() {
  local pid alive
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do  # up to 10 s to drain, then SIGKILL
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

if ! ip netns add "$lan" 2>"$tmp/err"; then
  echo "SKIP: cannot create network namespaces here (ip netns add: $(cat "$tmp/err")); needs root or CAP_NET_ADMIN"
  exit 0
fi
made+=("$lan")
on() { local ns=$1; shift; ip netns exec "$id-$ns" "$@"; }

# The switch, then each machine's cable: eth0 in the machine, its peer on the bridge.
ip -n "$lan" link add br0 type bridge
ip -n "$lan" link set br0 up
for h in "${hosts[@]}"; do
  ip netns add "$id-$h"
  made+=("$id-$h")
  ip link add eth0 netns "$id-$h" type veth peer name "p-$h" netns "$lan"
  ip -n "$lan" link set "p-$h" master br0 up
  ip -n "$id-$h" addr add "${ip[$h]}/24" dev eth0
  ip -n "$id-$h" link set eth0 up
  ip -n "$id-$h" link set lo up
done

"$build/tools/seqpipe-mkmodel" --preset tiny --spiece --seed 3 --out "$tmp/model" >/dev/null
hub=${ip[hub]}
# The hubs' key pair (server) and one client key pair per machine (a stranger's too, not admitted).
mkdir -p "$tmp/keys/allowed"
"$seqpipe" keygen --dir "$tmp/keys" server "${hosts[@]}" stranger >/dev/null
for h in "${hosts[@]}"; do cp "$tmp/keys/$h" "$tmp/keys/allowed/"; done
cat > "$tmp/pipeline.yaml" <<EOF
# The one config of every machine: the hubs bind these endpoints, the workers connect to them.
model:
  dir: $tmp/model
metrics:
  address: 0.0.0.0
gateway:
  client_endpoint: tcp://$hub:5555
  tokenizer_endpoint: tcp://$hub:5556
  results_endpoint: tcp://$hub:5557
batcher:
  ingress_endpoint: tcp://$hub:5560
  encoder_endpoint: tcp://$hub:5561
  decoder_endpoint: tcp://$hub:5562
  postprocessor_endpoint: tcp://$hub:5563
security:
  server_key: $tmp/keys/server
  client_key: $tmp/keys/client  # each machine sets its own (--set)
  allowed_clients: $tmp/keys/allowed
EOF

start() {  # start MACHINE STAGE; `ip netns exec` execs the service: $! is the service's pid
  ip netns exec "$id-$1" "$(svc "$2")" --config "$tmp/pipeline.yaml" --set "runtime_dir=$tmp/run-$1" \
    --set "security.client_key=$tmp/keys/$1" >>"$tmp/$1.log" 2>&1 &
  pids+=($!)
}
start hub gateway
start hub batcher
for h in w1 w2; do
  for s in tokenizer encoder decoder postprocessor; do start "$h" "$s"; done
done

status() { on client "$seqpipe" status --config "$tmp/pipeline.yaml" --set "runtime_dir=$tmp/run-client"; }
fail() {
  echo "FAIL: $*"
  for h in hub w1 w2; do echo "--- $h log"; tail -n 20 "$tmp/$h.log" 2>/dev/null || true; done
  exit 1
}

# Ready when every stage has 2 live replicas (each status probe waits up to 1 s for the hubs).
ready=no
for _ in $(seq 60); do
  if out=$(status 2>&1) && [ "$(echo "$out" | awk '$2 == 2' | wc -l)" -eq 4 ]; then
    ready=yes
    break
  fi
done
[ "$ready" = yes ] || fail "the pipeline did not come up with 2 replicas per worker stage: $out"
echo "$out"

# Requests from the client machine; each reply equals seqpipe-generate on the same model.
texts=("teh speling is bad" "hello world" "i cant beleive teh wether" "a")
for _ in 1 2 3; do
  for text in "${texts[@]}"; do
    got=$(on client "$seqpipe" send --config "$tmp/pipeline.yaml" --set "runtime_dir=$tmp/run-client" \
          --max-new-tokens 12 "$text") || fail "seqpipe send '$text' failed"
    want=$("$generate" --model "$tmp/model" --text "$text" --max-new-tokens 12 --threads 1 --json |
           /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])')
    [ "$(echo "$got" | head -n 1)" = "$want" ] || fail "'$text': got '$(echo "$got" | head -n 1)', want '$want'"
    echo "$got" | grep -q '^timings (us): ' || fail "no timings in the reply to '$text'"
  done
done
# One batch request of every text at once.
got=$(on client "$seqpipe" send --config "$tmp/pipeline.yaml" --set "runtime_dir=$tmp/run-client" \
      --max-new-tokens 12 "${texts[@]}") || fail "batch send failed"
[ "$(echo "$got" | grep -vcE '^(timings|tokens)')" -eq ${#texts[@]} ] || fail "batch reply: $got"
echo "replies: $(( 3 * ${#texts[@]} + 1 )) requests from ${ip[client]}, equal to seqpipe-generate"

# Every worker machine did work: its stages' request counters, scraped across the bridge from
# the hub machine (a Prometheus there would do the same).
sample() {  # sample HOST PORT SAMPLE -> its value, from the hub machine
  on hub /usr/bin/python3 - "$1" "$2" "$3" <<'EOF'
import sys, urllib.request
host, port, sample = sys.argv[1:]
body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
print(int(float(next(l.split()[-1] for l in body.splitlines() if l.startswith(sample + " ")))))
EOF
}
scrape() {  # scrape HOST PORT STAGE -> seqpipe_stage_requests_total of that stage
  sample "$1" "$2" "seqpipe_stage_requests_total{stage=\"$3\"}"
}
declare -A port=([tokenizer]=9110 [encoder]=9120 [decoder]=9130 [postprocessor]=9140)
declare -A items=([w1]=0 [w2]=0)
for s in tokenizer encoder decoder postprocessor; do
  total=0 line="$s:"
  for h in w1 w2; do
    n=$(scrape "${ip[$h]}" "${port[$s]}" "$s") || fail "cannot scrape $s on $h (${ip[$h]}:${port[$s]})"
    total=$((total + n)) items[$h]=$((items[$h] + n)) line="$line $h $n"
  done
  echo "$line"
  [ "$total" -gt 0 ] || fail "$s: no work counted on either machine"
done
if [ "${items[w1]}" -eq 0 ] || [ "${items[w2]}" -eq 0 ]; then
  fail "work did not spread: w1 ${items[w1]}, w2 ${items[w2]} items"
fi
# A client key the hubs do not admit: its handshake is refused, no reply, the refusal counted.
if on client "$seqpipe" send --config "$tmp/pipeline.yaml" --set "runtime_dir=$tmp/run-client" \
     --set "security.client_key=$tmp/keys/stranger" --timeout-ms 1000 "hello" >/dev/null 2>&1; then
  fail "a client key not in the allow list was served"
fi
refused=$(sample "$hub" 9100 'seqpipe_security_refusals_total{hub="gateway"}') || fail "no refusal counter"
[ "$refused" -ge 1 ] || fail "the stranger's refusal was not counted"
echo "a client key not in the allow list: no reply, $refused refusal(s) counted"
echo "netns: 4 machines over TCP, both worker machines served (w1 ${items[w1]}, w2 ${items[w2]} items)"
