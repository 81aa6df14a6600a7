#!/usr/bin/env bash
# Installs seqpipe as systemd services on this machine (run as root from the repository, after
# scripts/run.sh or a Release build):
#   deploy/systemd/install.sh [--prefix /usr/local] [--model DIR] [--build DIR] [--dest /]
# Binaries go to PREFIX/bin, the config to /etc/seqpipe/pipeline.yaml (runtime_dir /run/seqpipe,
# model.dir /var/lib/seqpipe/model), the model to /var/lib/seqpipe/model, the units to
# /etc/systemd/system; a system user `seqpipe` runs every service. --dest writes the same tree
# under another root (packaging, tests) and skips useradd and systemctl.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=/usr/local model=$root/models/speller-t5 dest=/ build=$root/build/release
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--prefix DIR] [--model DIR] [--build DIR] [--dest DIR]" >&2; exit 2 ;;
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
install -m 0644 "$model"/config.json "$model"/model.safetensors "$model"/spiece.model "$dest$modeldir/"
{
  echo "# seqpipe under systemd: the defaults of config/pipeline.yaml (documented there) with these keys."
  echo "runtime_dir: /run/seqpipe"
  echo "model:"
  echo "  dir: $modeldir"
} > "$dest$confdir/pipeline.yaml"
if [ "$dest" = / ]; then
  id seqpipe >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin seqpipe
  systemctl daemon-reload
  systemctl enable seqpipe.target
  echo "installed; start with: systemctl start seqpipe.target; status: seqpipe status --config $confdir/pipeline.yaml"
fi
