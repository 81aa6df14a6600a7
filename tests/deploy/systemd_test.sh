#!/usr/bin/env bash
# deploy/systemd: install.sh renders the units into a scratch root; every unit, one instance of
# each template and seqpipe.target, must pass `systemd-analyze verify` (unknown directives, bad
# values and missing executables are errors), and each carries the hardening it promises.
# Usage: systemd_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/tools/seqpipe-mkmodel" --preset tiny --spiece --out "$tmp/model" >/dev/null
"$src/deploy/systemd/install.sh" --dest "$tmp/root" --model "$tmp/model" --build "$build"
units=$tmp/root/etc/systemd/system
check=$tmp/check
mkdir -p "$check"
status=0
for s in gateway batcher tokenizer encoder decoder postprocessor; do
  # The binaries sit under the scratch root, not in /usr/local/bin: point ExecStart there.
  sed "s|/usr/local/bin/|$tmp/root/usr/local/bin/|" "$units/seqpipe-$s@.service" > "$check/seqpipe-$s@1.service"
  for directive in NoNewPrivileges=yes ProtectSystem=strict Restart=on-failure User=seqpipe \
                   "ReadOnlyPaths=/var/lib/seqpipe/model" "ExecStart=$tmp/root/usr/local/bin/seqpipe-$s --config /etc/seqpipe/pipeline.yaml"; do
    grep -qxF "$directive" "$check/seqpipe-$s@1.service" || { echo "seqpipe-$s@.service: missing '$directive'"; status=1; }
  done
done
cp "$units/seqpipe.target" "$check/"
out=$(cd "$check" && systemd-analyze verify ./*.service ./seqpipe.target 2>&1) || status=1
if [ -n "$out" ]; then
  echo "$out"
  status=1
fi
# The config install.sh writes must load (the services would exit 2 otherwise).
rc=0
"$tmp/root/usr/local/bin/seqpipe" status --config "$tmp/root/etc/seqpipe/pipeline.yaml" --set runtime_dir="$tmp/run" \
  >/dev/null 2>&1 || rc=$?  # 1: the hubs are not running (expected); 2 would be a bad config
[ "$rc" -ne 2 ] || { echo "the installed config does not load"; status=1; }
[ $status -eq 0 ] && echo "systemd units: $(ls "$check" | wc -l) verified"
exit $status
