#!/usr/bin/env bash
# The GPU check in one command, on a machine lent with a GPU (docs/dev/GPU-CHECK.md):
#   bash scripts/gpu-check.sh          with .gpu-carry/ (scripts/gpu-carry.sh) beside it
# Unpacks the carried Debian libraries into a private prefix (never /), then runs each step under
# its own time limit, going on after a failed one: the GPU tests (the engine's, on every
# device), the numerics against the CPU and the fixtures, engine_bench and PyTorch (fp16 and bf16)
# on the same GPU, the whole pipeline under seqpipe-bench, and engine_bench --profile's per-op and
# per-kernel tables. Writes $OUT/gpu-report.md (every bar, measured, met or not, and the tables)
# and the raw output beside it. Without a GPU (any other machine) it runs what it can, marks
# the GPU steps "skipped: no GPU" and still exits 0 with the report written.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/gpu-check-out}
carry=${GPU_CARRY:-$root/.gpu-carry}
# The device tool stops a command at 600 s; the steps share what is left of this budget.
budget=${GPU_CHECK_BUDGET_S:-560}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OUT work root
report=$OUT/gpu-report.md
log=$OUT/gpu-check.log
: >"$log"
: >"$work/steps.tsv"
say() { echo "gpu-check: $*" | tee -a "$log"; }

[ -f "$carry/MANIFEST" ] || { echo "gpu-check: no $carry/MANIFEST: run scripts/gpu-carry.sh first" >&2; exit 1; }
manifest() { awk -v k="$1" '$1 == k {sub(/^[^ ]+ ?/, ""); print}' "$carry/MANIFEST"; }

# The executables travel as one .tar.xz; python3 unpacks it where xz is missing (Debian minbase).
if command -v xz >/dev/null; then
  tar -C "$work" -xJf "$carry/bin.tar.xz"
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/bin.tar.xz" "$work"
fi
B=$work/bin
export B carry prefix machine_ld_path

# --- the carried libraries, in a private prefix -----------------------------------------------
prefix=$work/prefix
mkdir -p "$prefix"
if command -v xz >/dev/null; then
  tar -C "$prefix" -xJf "$carry/libs.tar.xz"
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/libs.tar.xz" "$prefix"
fi
libdirs=$(find "$prefix" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
# CUDA's runtime and cuBLAS come from the machine: the toolkit's folders, else wherever a
# library still missing is found (a pip wheel's nvidia/cu13/lib, say).
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libdirs+="$d:"
done
for lib in $(for b in "$B"/*; do LD_LIBRARY_PATH=$libdirs ldd "$b"; done | awk '$3 == "not" {print $1}' | sort -u); do
  found=$(find /usr/local /opt /usr/lib /usr/lib64 -name "$lib" -print -quit 2>/dev/null || true)
  [ -n "$found" ] && libdirs+="$(dirname "$found"):"
done
# Only the steps get the carried libraries (their Debian versions could shadow what python3 and
# torch load from the machine); torch runs with the machine's own setting, kept here.
machine_ld_path=${LD_LIBRARY_PATH:-}
steps_ld_path=${libdirs}${machine_ld_path}

# The tests have the source and build paths of the build machine compiled in (the fixtures'
# folder, seqpipe-mkmodel): make those paths lead here when this copy lives elsewhere.
src=$(manifest source_dir)
if [ "$src" != "$root" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$root" "$src" || say "cannot link $src to $root: tests reading compiled paths will fail"
fi
build_dir=$(manifest build_dir)
build_dir=${build_dir:-build/gpu}
while read -r name rel; do
  if [ ! -e "$build_dir/$rel" ]; then
    mkdir -p "$(dirname "$build_dir/$rel")"
    ln -sf "$B/$name" "$build_dir/$rel"
  fi
done < <(manifest path)

gpu=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi >"$work/nvidia-smi.out" 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu=1
else
  echo "no nvidia-smi on this machine" >"$work/nvidia-smi.out"
fi
cat "$work/nvidia-smi.out" >>"$log"
{ lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -m1 -E 'amx_bf16|avx512_bf16' /proc/cpuinfo | sort -u; } >>"$log" 2>&1 || true
no_gpu="skipped: no GPU"
export gpu no_gpu

# --- steps ------------------------------------------------------------------------------------
# step NAME CAP FUNCTION: runs FUNCTION in a child bash under the smaller of CAP seconds and the
# budget left; its output goes to the log and $work/NAME.out; its status to steps.tsv.
t0=$SECONDS
step() {
  local name=$1 cap=$2 fn=$3 left limit rc=0 status start=$SECONDS
  left=$((budget - (SECONDS - t0) - 15))
  limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 10 ]; then
    printf '%s\tskipped: out of time\t0\n' "$name" >>"$work/steps.tsv"
    return 0
  fi
  echo "=== $name (limit ${limit} s) $(date -u +%T)" >>"$log"
  LD_LIBRARY_PATH=$steps_ld_path timeout -k 10 "$limit" bash -c "set -euo pipefail; $fn" >"$work/$name.out" 2>&1 || rc=$?
  cat "$work/$name.out" >>"$log"
  case $rc in
    0) status=ok ;;
    77) status=$(tail -1 "$work/$name.out") ;;  # the step said why it did not run
    124 | 137) status="timed out after $limit s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\n' "$name" "$status" $((SECONDS - start)) >>"$work/steps.tsv"
  echo "=== $name: $status ($((SECONDS - start)) s)" >>"$log"
  write_report
}
skip() { echo "$1"; exit 77; }
export -f skip

have_torch() { LD_LIBRARY_PATH=$machine_ld_path python3 -c 'import torch, transformers' 2>/dev/null; }
export -f have_torch

libraries() {
  # Every executable finds every library among the carried ones and the machine's own.
  local bad=0
  for b in "$B"/*; do
    if ldd "$b" | grep 'not found'; then echo "  ^ $(basename "$b")"; bad=1; fi
  done
  ldd "$B/seqpipe-encoder" | sed 's/ (0x.*//'
  # What comes from the machine rather than the carried libraries: glibc, the GCC runtime, CUDA.
  echo "from the machine, not the carried prefix: $(for b in "$B"/*; do ldd "$b"; done |
    awk -v p="$prefix" '$2 == "=>" && index($3, p) != 1 {print $1}' | sort -u | tr '
' ' ')"
  [ "$bad" = 0 ]
}

gpu_tests() {
  # The gtest executables labelled gpu, else the engine's tests, which run on every device. On a
  # GPU each GPU test runs in its own process, launches synchronous, so a crash or a sticky CUDA
  # error is charged to its own test and the others still run; the CPU's run together.
  local tests t name rc=0 gpu_filter='*Cuda*:*Gpu*'
  tests=$(awk '$1 == "gpu_tests" {$1 = ""; print}' "$carry/MANIFEST")
  for t in $tests; do
    echo "--- $t (CPU)"
    "$B/$t" --gtest_color=no --gtest_brief=1 --gtest_filter="-$gpu_filter" || rc=1
  done
  [ "$gpu" = 1 ] || { [ "$rc" = 0 ] || return 1; skip "ok on the CPU; the GPU's instances not run (no GPU)"; }
  local passed=0 failed=()
  for t in $tests; do
    echo "--- $t (GPU, one process a test)"
    while read -r name; do
      if CUDA_LAUNCH_BLOCKING=1 timeout 60 "$B/$t" --gtest_color=no --gtest_brief=1 \
        --gtest_filter="$name" >"$work/one-test.out" 2>&1; then
        passed=$((passed + 1))
      else
        failed+=("$t $name (exit $?)")
        cat "$work/one-test.out"
      fi
    done < <("$B/$t" --gtest_list_tests --gtest_filter="$gpu_filter" |
      awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}')
  done
  echo "GPU tests: $passed passed, ${#failed[@]} failed (*CudaEager: every op issued as it comes)"
  [ "${#failed[@]}" = 0 ] || printf '  FAILED %s\n' "${failed[@]}"
  [ "$rc" = 0 ] && [ "${#failed[@]}" = 0 ]
}

numerics() {
  command -v python3 >/dev/null || skip "skipped: no python3"
  # Without a GPU there is nothing to compare: the CPU's parity on 20 inputs shows the tools
  # start and agree (CI's tools.speller_parity runs all 200).
  python3 scripts/gpu_numerics.py --generate "$B/seqpipe-generate" --json "$OUT/numerics.json" \
    $([ "$gpu" = 1 ] && echo --cuda cuda || echo --speller-inputs 20)
}

models() {
  # engine_bench's and the torch bench's checkpoint (PERFORMANCE.md's), and the pipeline's: the
  # same layers with a 500-piece tokenizer so random ids decode to words.
  "$B/seqpipe-mkmodel" --preset t5-small --seed 0 --out "$work/t5-small"
  "$B/seqpipe-mkmodel" --preset t5-small --vocab-size 500 --untied --seed 0 --spiece \
    --corpus tools/mkmodel/corpus.txt --out "$work/t5-small-sp"
}

engine_bench() {
  [ -f "$work/t5-small/model.safetensors" ] || skip "skipped: no model (models failed)"
  if [ "$gpu" = 1 ]; then
    # fp16 first: the bars' type (the seeds'); bf16 beside it, fp32 for the record.
    for ct in float16 bfloat16 float32; do
      echo "--- engine_bench --device cuda --compute-type $ct"
      "$B/engine_bench" --model "$work/t5-small" --device cuda --compute-type "$ct" --runs 200 --quick
    done
    echo "--- eager, --no-cuda-graphs (every op issued as it comes): engine_bench float16"
    "$B/engine_bench" --model "$work/t5-small" --device cuda --no-cuda-graphs \
      --compute-type float16 --runs 100 --quick
  else
    # Proves the bench starts and runs here, on the tiny fixture (t5-small's batches take minutes
    # on a small CPU); its CPU figures are not the bars'.
    "$B/engine_bench" --model tests/data/t5-tiny-random --threads "$(nproc)" --runs 5 --quick
    skip "$no_gpu (ran on the CPU: the tiny fixture, --runs 5)"
  fi
}

torch_bench() {
  [ "$gpu" = 1 ] || skip "$no_gpu"
  command -v python3 >/dev/null && have_torch || skip "skipped: no torch/transformers in python3"
  LD_LIBRARY_PATH=$machine_ld_path python3 bench/torch_t5.py --model "$work/t5-small" --device cuda \
    --dtypes float16,bfloat16 | tee "$OUT/torch_t5.json"
}

pipeline() {
  [ -f "$work/t5-small-sp/model.safetensors" ] || skip "skipped: no model (models failed)"
  local device=cpu on_gpu=()
  # Without a GPU the key is left out: the CPU is its default (and builds before it reject it).
  [ "$gpu" = 1 ] && device=cuda on_gpu=(--set model.device=cuda)
  run_dir=$(mktemp -d /tmp/seqpipe-gpucheck.XXXXXX)
  settings=(--config config/pipeline.yaml --set "model.dir=$work/t5-small-sp" --set "runtime_dir=$run_dir"
            --set "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock" "${on_gpu[@]}"
            --set encoder.replicas=1 --set decoder.replicas=1)  # not one a core group: one GPU
  # Metrics on free ports, as seqpipe-bench sweep starts its pipelines: another pipeline on the
  # machine may hold the default ones.
  for stage in gateway batcher tokenizer encoder decoder postprocessor; do
    settings+=(--set "$stage.metrics_port=0")
  done
  # One pipeline, one request through the gateway, as scripts/run.sh does.
  "$B/seqpipe" up "${settings[@]}" >"$run_dir/up.log" 2>&1 &
  up_pid=$!
  # On the way out (a failure too): stop it and show the end of its log. errexit holds in traps.
  trap 'kill -TERM $up_pid 2>/dev/null || true; wait $up_pid 2>/dev/null || true; echo "--- seqpipe up (last 20 lines)"; tail -20 "$run_dir/up.log" || true' EXIT
  for _ in $(seq 1 150); do
    "$B/seqpipe" send "${settings[@]}" --timeout-ms 500 --max-new-tokens 2 "warm up" >/dev/null 2>&1 && break
    kill -0 "$up_pid" 2>/dev/null || { echo "the pipeline exited"; exit 1; }
    sleep 0.2
  done
  echo "--- seqpipe send (model.device=$device)"
  "$B/seqpipe" send "${settings[@]}" --timeout-ms 5000 --max-new-tokens 11 --min-new-tokens 11 "teh speling is bad"
  echo "--- seqpipe-bench --concurrency 1 (model.device=$device)"
  "$B/seqpipe-bench" "${settings[@]}" --concurrency 1 --requests 50 --max-new-tokens 11 \
    --min-new-tokens 11 --words 3:5 --no-progress
  kill -TERM "$up_pid"; wait "$up_pid" 2>/dev/null || true
  trap - EXIT
  if [ "$gpu" = 1 ]; then
    # PERFORMANCE.md's sweep, one replica a stage, on the GPU: p50/p99 at concurrency 1 and the
    # highest rate with p99 < 50 ms, fp16 (the bars' type) and bf16.
    echo "--- seqpipe-bench sweep (model.device=cuda)"
    "$B/seqpipe-bench" sweep --seqpipe "$B/seqpipe" --config config/pipeline.yaml --model "$work/t5-small-sp" \
      --grid "model.compute_type=float16,bfloat16" --set model.device=cuda \
      --set decoder.replicas=1 --set encoder.replicas=1 --set tokenizer.replicas=1 --set postprocessor.replicas=1 \
      --concurrency-range 1:64 --max-new-tokens 11 --min-new-tokens 11 --words 3:5 --slo-p99-ms 50 \
      --min-gain -1 --duration 3 --no-progress --json "$OUT/pipeline.json"
  else
    skip "$no_gpu (the pipeline answered on the CPU)"
  fi
}

profile() {
  # Where a GPU generate's time goes, without Nsight: engine_bench --profile times each op (host,
  # waited for) and each kernel (CUDA events; no graphs in this mode), batch 1 and batch 64, fp16.
  # The report shows the tables (gpu_bars.py). Without a GPU, the CPU's per-op profile, briefly.
  [ -f "$work/t5-small/model.safetensors" ] || skip "skipped: no model (models failed)"
  if [ "$gpu" = 1 ]; then
    for batch in 1 64; do
      echo "--- engine_bench --profile --profile-batch $batch --compute-type float16"
      "$B/engine_bench" --model "$work/t5-small" --device cuda --compute-type float16 --runs 20 \
        --quick --profile --profile-batch "$batch" | sed -n '/^== per-op profile/,$p'
    done
  else
    echo "--- engine_bench --profile (CPU, the tiny fixture, --runs 5)"
    "$B/engine_bench" --model tests/data/t5-tiny-random --threads "$(nproc)" --runs 5 --quick \
      --profile | sed -n '/^== per-op profile/,$p'
    skip "$no_gpu (the CPU's per-op profile ran, on the tiny fixture)"
  fi
}

export -f libraries gpu_tests numerics models engine_bench torch_bench pipeline profile

write_report() {
  {
    echo "# GPU check"
    echo
    echo "$(date -u '+%F %T UTC'), $(hostname), $(nproc) cores; build: $(manifest commit) ($(manifest built))."
    if [ "$gpu" = 1 ]; then
      echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"
    else
      echo "GPU: none (nvidia-smi: $(head -1 "$work/nvidia-smi.out"))"
    fi
    echo
    if command -v python3 >/dev/null; then
      python3 scripts/gpu_bars.py "$work" "$OUT" || echo "(gpu_bars.py failed: see $log)"
    else
      echo "(no python3: the bars are not evaluated; see the steps' output below)"
    fi
    echo
    echo "## Steps"
    echo
    echo "| step | status | seconds |"
    echo "|---|---|---|"
    awk -F'\t' '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$work/steps.tsv"
    echo
    echo "Raw output: gpu-check.log (every step in full)$(cd "$OUT" && for f in *.json; do [ -e "$f" ] && printf ', %s' "$f"; done)."
    while IFS=$'\t' read -r name _ _; do
      echo
      echo "### $name (last 40 lines)"
      echo
      echo '```'
      tail -40 "$work/$name.out"
      echo '```'
    done <"$work/steps.tsv"
  } >"$report.tmp"
  mv "$report.tmp" "$report"
}

say "GPU: $([ "$gpu" = 1 ] && echo yes || echo none); OUT=$OUT; budget $budget s"
# GPU_CHECK_STEPS: the steps to run (default: all), e.g. "models profile".
steps=${GPU_CHECK_STEPS:-libraries gpu_tests numerics models engine_bench torch_bench pipeline profile}
declare -A cap=([libraries]=30 [gpu_tests]=150 [numerics]=180 [models]=60 [engine_bench]=90
  [torch_bench]=120 [pipeline]=150 [profile]=60)
for name in $steps; do
  [ -n "${cap[$name]:-}" ] || { say "no step $name"; continue; }
  step "$name" "${cap[$name]}" "$name"
done
write_report
say "done in $((SECONDS - t0)) s: $report"
cat "$report"
