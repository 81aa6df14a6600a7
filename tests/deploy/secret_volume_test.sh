#!/bin/bash
# Key files as a Kubernetes Secret volume presents them, for real: a read-only tmpfs (mount point
# mode 1777), the kubelet's layout (`..data` -> `..<timestamp>/`, each key a symlink through
# `..data`), files mode 0440 owned by root with the pod's fsGroup (10001), read by a batcher
# running as uid/gid 10001. It must start with CurveZMQ on and answer /ready. The same files on a
# writable mount must be refused (the relaxation holds on read-only mounts only).
# Needs root (mount namespaces, setpriv); prints "SKIP: <why>" otherwise.
#   secret_volume_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
seqpipe="$build/tools/seqpipe"
batcher="$build/services/batcher/seqpipe-batcher"
if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null || ! command -v setpriv >/dev/null; then
  echo "SKIP: needs root, unshare and setpriv (util-linux) to make a Secret volume's mounts"
  exit 0
fi
if ! unshare -m true 2>/dev/null; then
  echo "SKIP: cannot make a mount namespace here"
  exit 0
fi
work=$(mktemp -d /tmp/seqpipe-secret-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
"$seqpipe" keygen --dir "$work/made" hub client >/dev/null

cat >"$work/run.sh" <<'INNER'
#!/bin/bash
# Inside a private mount namespace: $1 work dir, $2 "ro" or "rw", then the batcher and its args.
set -euo pipefail
work=$1 mode=$2 batcher=$3
# A Secret volume as the kubelet writes one: files in a timestamped folder, `..data` pointing at
# it, and one symlink per key through `..data`.
secret_volume() {  # dir, files...
  local dir=$1; shift
  mkdir -p "$dir"
  mount -t tmpfs -o mode=1777 tmpfs "$dir"
  mkdir "$dir/..2026_11_28_00_00_00.000000001"
  for f in "$@"; do
    cp "$work/made/$f" "$dir/..2026_11_28_00_00_00.000000001/$f"
    chown 0:10001 "$dir/..2026_11_28_00_00_00.000000001/$f"
    chmod 0440 "$dir/..2026_11_28_00_00_00.000000001/$f"
    ln -s "..data/$f" "$dir/$f"
  done
  ln -s ..2026_11_28_00_00_00.000000001 "$dir/..data"
  if [[ $mode == ro ]]; then mount -o remount,ro "$dir"; fi
}
secret_volume "$work/keys" hub hub_secret client client_secret
secret_volume "$work/allowed" client
mkdir -p "$work/run" && chown 10001:10001 "$work/run"
exec setpriv --reuid=10001 --regid=10001 --clear-groups "$batcher" \
  --set runtime_dir="$work/run" --set batcher.metrics_port=0 \
  --set security.server_key="$work/keys/hub" --set security.client_key="$work/keys/client" \
  --set security.allowed_clients="$work/allowed"
INNER
chmod +x "$work/run.sh"

# Read-only (a Secret volume): it starts, CurveZMQ on, and is ready.
log="$work/ro.log"
unshare -m --propagation private "$work/run.sh" "$work" ro "$batcher" >"$log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(grep -o 'metrics on :[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [[ -n "$port" ]] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  echo "FAIL: the batcher did not start on the Secret volume's keys:"; cat "$log"; exit 1
fi
ready=$(curl -s "http://127.0.0.1:$port/ready" || true)
kill -TERM $pid; wait $pid || true
grep -q "CurveZMQ on, 1 client key(s) allowed" "$log" || { echo "FAIL: CurveZMQ not on:"; cat "$log"; exit 1; }
[[ "$ready" == "ready" ]] || { echo "FAIL: /ready answered '$ready'"; cat "$log"; exit 1; }
echo "ok: read-only Secret volume (0440 root:10001, 1777, ..data links) accepted; /ready: $ready"

# The same layout writable: refused, exit 2, with the reason.
set +e
unshare -m --propagation private "$work/run.sh" "$work" rw "$batcher" >"$work/rw.log" 2>&1
status=$?
set -e
if [[ $status -ne 2 ]] || ! grep -q "must not be" "$work/rw.log"; then
  echo "FAIL: writable 0440/1777 key files were not refused (exit $status):"; cat "$work/rw.log"; exit 1
fi
echo "ok: the same files on a writable mount refused: $(grep -o 'security[^ ]*: .*' "$work/rw.log" | head -1)"
