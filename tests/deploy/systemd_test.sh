#!/usr/bin/env bash
# deploy/systemd: install.sh renders the units into a scratch root; every unit, one instance of
# each template and seqpipe.target, must pass `systemd-analyze verify` (unknown directives, bad
# values and missing executables are errors), and each carries the hardening it promises. With
# --keys (CurveZMQ), each unit gets a drop-in handing it its keys as credentials (LoadCredential=),
# verified with it; the secret files are installed readable by root alone. With --repository, an
# instance of each worker stage per model, each with its model's drop-in, verified the same way.
# The encoder and decoder units run every compute type and GPUs: no MemoryDenyWriteExecute (it
# forbids oneDNN's JIT, which int8 and bf16 need) and no PrivateDevices (it hides /dev/nvidia*);
# the other units keep both. The gateway and batcher units allow AF_NETLINK (ZeroMQ lists the
# interfaces to bind a tcp:// endpoint). The units are not started here: tests/deploy/
# systemd_up_test.py (ctest deploy.systemd_up) starts them under systemd as PID 1 in a container.
# Usage: systemd_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/tools/seqpipe-mkmodel" --preset tiny --spiece --out "$tmp/model" >/dev/null
"$build/tools/seqpipe" keygen --dir "$tmp" hub client w2 >/dev/null
mkdir "$tmp/allowed" && cp "$tmp/client" "$tmp/w2" "$tmp/allowed/"
"$src/deploy/systemd/install.sh" --dest "$tmp/root" --model "$tmp/model" --build "$build" --keys "$tmp"
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
  case $s in
    gateway|batcher) families="AF_UNIX AF_INET AF_INET6 AF_NETLINK" ;;
    *) families="AF_UNIX AF_INET AF_INET6" ;;
  esac
  grep -qxF "RestrictAddressFamilies=$families" "$check/seqpipe-$s@1.service" ||
    { echo "seqpipe-$s@.service: not 'RestrictAddressFamilies=$families'"; status=1; }
  case $s in
    encoder|decoder)
      for directive in MemoryDenyWriteExecute=yes PrivateDevices=yes; do
        grep -qxF "$directive" "$check/seqpipe-$s@1.service" && { echo "seqpipe-$s@.service: '$directive' breaks int8/bf16 (JIT) or GPUs"; status=1; }
      done ;;
    *)
      for directive in MemoryDenyWriteExecute=yes PrivateDevices=yes; do
        grep -qxF "$directive" "$check/seqpipe-$s@1.service" || { echo "seqpipe-$s@.service: missing '$directive'"; status=1; }
      done ;;
  esac
  mkdir "$check/seqpipe-$s@1.service.d"
  sed "s|/usr/local/bin/|$tmp/root/usr/local/bin/|" "$units/seqpipe-$s@.service.d/keys.conf" \
    > "$check/seqpipe-$s@1.service.d/keys.conf"
  credentials="LoadCredential=hub:/etc/seqpipe/keys/hub LoadCredential=client_secret:/etc/seqpipe/keys/client_secret"
  case $s in gateway|batcher) credentials="$credentials LoadCredential=hub_secret:/etc/seqpipe/keys/hub_secret" ;; esac
  for directive in $credentials; do
    grep -qxF "$directive" "$check/seqpipe-$s@1.service.d/keys.conf" || { echo "seqpipe-$s@.service.d: missing '$directive'"; status=1; }
  done
  grep -q "^ExecStart=.* --set security.server_key=%d/hub --set security.client_key=%d/client" \
    "$check/seqpipe-$s@1.service.d/keys.conf" || { echo "seqpipe-$s@.service.d: ExecStart without the keys"; status=1; }
done
for f in hub_secret client_secret; do
  [ "$(stat -c %a "$tmp/root/etc/seqpipe/keys/$f")" = 600 ] || { echo "keys/$f is not mode 600"; status=1; }
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
# And with the keys, as a drop-in's ExecStart gives them (the installed files standing in for the
# credentials).
rc=0
"$tmp/root/usr/local/bin/seqpipe" status --config "$tmp/root/etc/seqpipe/pipeline.yaml" --set runtime_dir="$tmp/run" \
  --set security.server_key="$tmp/root/etc/seqpipe/keys/hub" --set security.client_key="$tmp/root/etc/seqpipe/keys/client" \
  >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 2 ] || { echo "the installed config with its keys does not load"; status=1; }
# --repository: one instance of each worker stage per model at its highest version (alpha/2; beta,
# a flat model directory, as version 1), each with a drop-in naming its model and keeping its keys;
# the target wants those instead of the numbered ones, and the config serves the repository.
mkdir -p "$tmp/repo/alpha/1" "$tmp/repo/alpha/2"
cp "$tmp/model"/* "$tmp/repo/alpha/1/" && cp "$tmp/model"/* "$tmp/repo/alpha/2/"
cp -r "$tmp/model" "$tmp/repo/beta"
"$src/deploy/systemd/install.sh" --dest "$tmp/root2" --model "$tmp/model" --build "$build" --keys "$tmp" \
  --repository "$tmp/repo"
units2=$tmp/root2/etc/systemd/system
check2=$tmp/check2
mkdir -p "$check2"
for want in alpha:2 beta:1; do
  name=${want%:*} version=${want#*:}
  [ -f "$tmp/root2/var/lib/seqpipe/models/$name/$version/model.safetensors" ] || { echo "$name/$version not installed"; status=1; }
  for s in tokenizer encoder decoder postprocessor; do
    unit=seqpipe-$s@$name.service
    grep -qxF "Wants=$unit" "$units2/seqpipe.target" || { echo "seqpipe.target does not want $unit"; status=1; }
    grep -q "^ExecStart=.* --set security.server_key=%d/hub .* --set model.dir=/var/lib/seqpipe/models/$name/$version --set model.name=$name --set model.version=$version$" \
      "$units2/$unit.d/model.conf" || { echo "$unit.d/model.conf: not its model with its keys"; status=1; }
    sed "s|/usr/local/bin/|$tmp/root2/usr/local/bin/|" "$units2/seqpipe-$s@.service" > "$check2/$unit"
    mkdir "$check2/$unit.d"
    for conf in "$units2/seqpipe-$s@.service.d/keys.conf" "$units2/$unit.d/model.conf"; do
      sed "s|/usr/local/bin/|$tmp/root2/usr/local/bin/|" "$conf" > "$check2/$unit.d/$(basename "$conf")"
    done
  done
done
grep -q "seqpipe-encoder@1.service" "$units2/seqpipe.target" && { echo "seqpipe.target still wants numbered workers"; status=1; }
cp "$units2/seqpipe.target" "$check2/"
out=$(cd "$check2" && systemd-analyze verify ./*.service ./seqpipe.target 2>&1) || status=1
if [ -n "$out" ]; then
  echo "$out"
  status=1
fi
grep -qxF "  repository: /var/lib/seqpipe/models" "$tmp/root2/etc/seqpipe/pipeline.yaml" || { echo "the config does not serve the repository"; status=1; }
[ $status -eq 0 ] && echo "systemd units: $(ls "$check" | wc -l) verified, and $(ls "$check2" | wc -l) with a repository"
exit $status
