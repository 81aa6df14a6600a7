#!/bin/bash
# Renders every kustomization under deploy/k8s (each overlay and kserve/) with `kubectl kustomize`
# and checks every object against its schema (scripts/k8s-schema: kubernetes-models and its KEDA
# and Prometheus Operator packages, pinned by package-lock.json, installed with `npm ci` into
# SEQPIPE_K8S_NPM_DIR, default ~/.cache/seqpipe-k8s-npm/<lock hash>). With --bin DIR (the build's
# services), every pipeline.yaml there is loaded by seqpipe-batcher --print-config: every key known
# and in range. Prints "SKIP: <why>" and exits 0 where kubectl, node or the npm registry is
# missing; exits 1 when an overlay does not render or an object is invalid.
#   scripts/check-k8s.sh [--bin build/release/services/batcher]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=""
if [[ "${1:-}" == "--bin" ]]; then bin=$2; fi

if ! command -v kubectl >/dev/null; then
  echo "SKIP: kubectl is not installed (it is not a Debian package; kustomize is built into it)"
  exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are needed for the schema check (scripts/debian-packages.txt: npm)"
  exit 0
fi

schema="$root/scripts/k8s-schema"
lock_hash=$(sha256sum "$schema/package-lock.json" | cut -c1-16)
npm_dir=${SEQPIPE_K8S_NPM_DIR:-$HOME/.cache/seqpipe-k8s-npm/$lock_hash}
if [[ ! -d "$npm_dir/node_modules/kubernetes-models" ]]; then
  mkdir -p "$npm_dir"
  cp "$schema/package.json" "$schema/package-lock.json" "$npm_dir/"
  if ! (cd "$npm_dir" && npm ci --no-audit --no-fund >npm-ci.log 2>&1); then
    echo "SKIP: npm ci could not install the schema packages: $(tail -3 "$npm_dir/npm-ci.log")"
    rm -rf "$npm_dir/node_modules"
    exit 0
  fi
fi
cp "$schema/validate.mjs" "$npm_dir/"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rendered=()
for dir in "$root"/deploy/k8s/overlays/*/ "$root"/deploy/k8s/kserve/; do
  name=$(basename "$dir")
  if ! kubectl kustomize "$dir" >"$out/$name.yaml" 2>"$out/$name.err"; then
    echo "FAIL: kubectl kustomize $dir: $(cat "$out/$name.err")"
    exit 1
  fi
  echo "rendered $name: $(grep -c '^kind:' "$out/$name.yaml") objects"
  rendered+=("$out/$name.yaml")
done
node "$npm_dir/validate.mjs" "${rendered[@]}"

if [[ -n "$bin" ]]; then
  # The keys are the Secrets' (absent here): --print-config loads and checks the config only.
  for config in "$root"/deploy/k8s/base/pipeline.yaml "$root"/deploy/k8s/overlays/*/pipeline.yaml; do
    "$bin/seqpipe-batcher" --config "$config" --print-config >/dev/null
    echo "ok    ${config#"$root/"} loads (seqpipe-batcher --print-config)"
  done
fi
echo "deploy/k8s: every overlay renders and every object passes its schema"
