#!/usr/bin/env bash
# Installs seqpipe as systemd services on this machine (run as root from the repository, after
# scripts/run.sh or a Release build):
#   deploy/systemd/install.sh [--prefix /usr/local] [--model DIR] [--build DIR] [--dest /]
#                             [--keys DIR] [--repository DIR]
# Binaries go to PREFIX/bin, the config to /etc/seqpipe/pipeline.yaml (runtime_dir /run/seqpipe,
# model.dir /var/lib/seqpipe/model), the model to /var/lib/seqpipe/model, the units to
# /etc/systemd/system; a system user `seqpipe` runs every service. --dest writes the same tree
# under another root (packaging, tests) and skips useradd and systemctl.
# --keys DIR turns CurveZMQ on (docs/DEPLOY.md, "Keys"): DIR holds `hub` (the hubs' public key) and
# `client_secret` (this machine's key pair), on a hub machine also `hub_secret` and `allowed/` (the
# client keys the hubs admit). They go to /etc/seqpipe/keys, the secret files readable by root
# alone; systemd hands each service copies only it can read (LoadCredential=, in a drop-in per
# unit that points the service at them).
# --repository DIR serves a model repository (DIR/<name>/<version>/, or DIR/<name>/ holding a model
# as its version 1): each model's highest version goes to /var/lib/seqpipe/models/<name>/<version>,
# and seqpipe.target wants one instance of each worker stage per model, named after it
# (seqpipe-encoder@<name>.service, a drop-in giving it its model), instead of the numbered ones.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=/usr/local model=$root/models/speller-t5 dest=/ build=$root/build/release keys= repository=
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --repository) repository=$2; shift 2 ;;
    *) echo "usage: $0 [--prefix DIR] [--model DIR] [--build DIR] [--dest DIR] [--keys DIR] [--repository DIR]" >&2; exit 2 ;;
  esac
done
bindir=$prefix/bin confdir=/etc/seqpipe modeldir=/var/lib/seqpipe/model docdir=/usr/share/doc/seqpipe
repodir=/var/lib/seqpipe/models
# The --set arguments that point stage $1 at the keys systemd hands it (none without --keys).
key_args() {
  [ -n "$keys" ] || return 0
  local args="--set security.server_key=%d/hub --set security.client_key=%d/client"
  case $1 in gateway|batcher) args="$args --set security.allowed_clients=$confdir/keys/allowed" ;; esac
  echo "$args"
}
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
  [ -z "$repository" ] || echo "  repository: $repodir"
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
      [ "$hub" = no ] || echo "LoadCredential=hub_secret:$keydir/hub_secret"
      echo "ExecStart="
      echo "ExecStart=$bindir/seqpipe-$s --config $confdir/pipeline.yaml $(key_args $s)"
    } > "$dropin/keys.conf"
  done
fi
if [ -n "$repository" ]; then
  target=$dest/etc/systemd/system/seqpipe.target
  {
    echo "# The whole seqpipe pipeline on this machine, one replica of each worker stage per model of"
    echo "# the repository (install.sh --repository): \`systemctl start seqpipe.target\`."
    echo "[Unit]"
    echo "Description=seqpipe serving pipeline (model repository)"
    echo "Wants=seqpipe-gateway@1.service seqpipe-batcher@1.service"
  } > "$target"
  for dir in "$repository"/*/; do
    name=$(basename "$dir") version=1 src=$dir
    if [ ! -f "$dir/config.json" ]; then
      version=$(ls "$dir" | grep -xE '[0-9]+' | sort -n | tail -1)
      [ -n "$version" ] || { echo "--repository: $dir holds no version; left out" >&2; continue; }
      src=$dir/$version
    fi
    install -d "$dest$repodir/$name/$version"
    find "$src" -maxdepth 1 -type f -exec install -m 0644 -t "$dest$repodir/$name/$version/" {} +
    for s in tokenizer encoder decoder postprocessor; do
      dropin=$dest/etc/systemd/system/seqpipe-$s@$name.service.d
      install -d "$dropin"
      {
        echo "# The model version this instance serves, written by install.sh --repository."
        echo "[Service]"
        echo "ExecStart="
        echo "ExecStart=$bindir/seqpipe-$s --config $confdir/pipeline.yaml $(key_args $s) --set model.dir=$repodir/$name/$version --set model.name=$name --set model.version=$version"
      } > "$dropin/model.conf"
      echo "Wants=seqpipe-$s@$name.service" >> "$target"
    done
  done
  printf '\n[Install]\nWantedBy=multi-user.target\n' >> "$target"
fi
if [ "$dest" = / ]; then
  id seqpipe >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin seqpipe
  systemctl daemon-reload
  systemctl enable seqpipe.target
  echo "installed; start with: systemctl start seqpipe.target; status: seqpipe status --config $confdir/pipeline.yaml"
fi
