#!/usr/bin/env bash
# Installs seqpipe as systemd services on this machine (run as root from the repository, after
# scripts/run.sh or a Release build):
#   deploy/systemd/install.sh [--prefix /usr/local] [--model DIR] [--build DIR] [--dest /]
#                             [--keys DIR]
# Binaries go to PREFIX/bin, the config to /etc/seqpipe/pipeline.yaml (runtime_dir /run/seqpipe,
# model.dir /var/lib/seqpipe/model), the model to /var/lib/seqpipe/model, the units to
# /etc/systemd/system; a system user `seqpipe` runs every service. --dest writes the same tree
# under another root (packaging, tests) and skips useradd and systemctl.
# --keys DIR turns CurveZMQ on (docs/DEPLOY.md, "Keys"): DIR holds `hub` (the hubs' public key) and
# `client_secret` (this machine's key pair), on a hub machine also `hub_secret` and `allowed/` (the
# client keys the hubs admit). They go to /etc/seqpipe/keys, the secret files readable by root
# alone; systemd hands each service copies only it can read (LoadCredential=, in a drop-in per
# unit that points the service at them).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=/usr/local model=$root/models/speller-t5 dest=/ build=$root/build/release keys=
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    *) echo "usage: $0 [--prefix DIR] [--model DIR] [--build DIR] [--dest DIR] [--keys DIR]" >&2; exit 2 ;;
  esac
done
bindir=$prefix/bin confdir=/etc/seqpipe modeldir=/var/lib/seqpipe/model docdir=/usr/share/doc/seqpipe
install -d "$dest$bindir" "$dest$confdir" "$dest$modeldir" "$dest/etc/systemd/system" "$dest$docdir"
for s in gateway batcher tokenizer encoder decoder postprocessor; do
  install -m 0755 "$build/services/$s/seqpipe-$s" "$dest$bindir/"
  sed -e "s|@BINDIR@|$bindir|g" -e "s|@CONFDIR@|$confdir|g" -e "s|@MODELDIR@|$modeldir|g" -e "s|@DOCDIR@|$docdir|g" \
    "$root/deploy/systemd/seqpipe-$s@.service" > "$dest/etc/systemd/system/seqpipe-$s@.service"
done
install -m 0755 "$build/tools/seqpipe" "$dest$bindir/"
install -m 0644 "$root/deploy/systemd/seqpipe.target" "$dest/etc/systemd/system/"
install -m 0644 "$root/docs/ARCHITECTURE.md" "$dest$docdir/"
# Every file of the model directory: the weights and tokenizer, and the model's own settings
# (seqpipe.yaml, applied under /etc/seqpipe/pipeline.yaml) with the files it names beside it.
find "$model" -maxdepth 1 -type f -exec install -m 0644 -t "$dest$modeldir/" {} +
{
  echo "# seqpipe under systemd: the defaults of config/pipeline.yaml (documented there), the model's"
  echo "# own settings ($modeldir/seqpipe.yaml, if any), and over them these keys."
  echo "runtime_dir: /run/seqpipe"
  echo "model:"
  echo "  dir: $modeldir"
} > "$dest$confdir/pipeline.yaml"
if [ -n "$keys" ]; then
  for f in hub client_secret; do
    [ -f "$keys/$f" ] || { echo "--keys $keys: no $f (docs/DEPLOY.md, Keys)" >&2; exit 2; }
  done
  keydir=$confdir/keys
  install -d -m 0755 "$dest$keydir"
  install -m 0644 "$keys/hub" "$dest$keydir/"
  install -m 0600 "$keys/client_secret" "$dest$keydir/"
  hub_machine=no
  if [ -f "$keys/hub_secret" ]; then
    hub_machine=yes
    install -m 0600 "$keys/hub_secret" "$dest$keydir/"
    install -d -m 0755 "$dest$keydir/allowed"
    install -m 0644 "$keys"/allowed/* "$dest$keydir/allowed/"
  fi
  for s in gateway batcher tokenizer encoder decoder postprocessor; do
    case $s in
      gateway|batcher) [ "$hub_machine" = yes ] || continue; hub=yes ;;  # no hub keys: no hub here
      *) hub=no ;;
    esac
    dropin=$dest/etc/systemd/system/seqpipe-$s@.service.d
    install -d "$dropin"
    {
      echo "# CurveZMQ keys, written by install.sh --keys: systemd copies them into the"
      echo "# service's credentials directory (%d), readable by the service alone."
      echo "[Service]"
      echo "LoadCredential=hub:$keydir/hub"
      echo "LoadCredential=client_secret:$keydir/client_secret"
      args="--set security.server_key=%d/hub --set security.client_key=%d/client"
      if [ "$hub" = yes ]; then
        echo "LoadCredential=hub_secret:$keydir/hub_secret"
        args="$args --set security.allowed_clients=$keydir/allowed"
      fi
      echo "ExecStart="
      echo "ExecStart=$bindir/seqpipe-$s --config $confdir/pipeline.yaml $args"
    } > "$dropin/keys.conf"
  done
fi
if [ "$dest" = / ]; then
  id seqpipe >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin seqpipe
  systemctl daemon-reload
  systemctl enable seqpipe.target
  echo "installed; start with: systemctl start seqpipe.target; status: seqpipe status --config $confdir/pipeline.yaml"
fi
