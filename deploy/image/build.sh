#!/bin/bash
# Builds seqpipe's container images with no registry: the runtime image from Debian packages
# (mmdebstrap: Debian 12 with its security updates, the shared libraries of
# deploy/compose/runtime-packages.txt, a non-root user of uid 10001), imported into the engine,
# then the product image on top of it: the service binaries of a build directory, the bundled
# model, config/pipeline.yaml. Podman or Docker (whichever is installed; --engine to choose).
#   deploy/image/build.sh [--engine podman|docker] [--build-dir build/release]
#                         [--model models/speller-t5] [--tag localhost/seqpipe:latest]
#   deploy/image/build.sh --print-content-tag [--build-dir DIR] [--model DIR]
#   deploy/image/build.sh --systemd [--print-content-tag | --tag TAG]
# --print-content-tag prints the tag that names these inputs' image (localhost/seqpipe:src-<hash
# of the binaries, the model, config/pipeline.yaml and this folder's and the runtime package
# list's files>), builds nothing: tests build under it, or reuse an image only when it is there.
# --systemd builds the runtime image with systemd as its init instead (Debian's systemd and
# systemd-sysv added, root, /sbin/init its command; no binaries, no model, so its content tag,
# localhost/seqpipe-systemd:src-<hash>, names this folder's and the runtime package list's files
# only): a Debian 12 machine in a container, where deploy/systemd/install.sh installs a checkout
# mounted in it and the units run under systemd as PID 1 (tests/deploy/systemd_up_test.py).
# The binaries are the build directory's: configure it with -DSEQPIPE_MARCH=x86-64-v3 (as
# deploy/compose/Dockerfile does) for an image that runs on machines other than this one.
# Needs root (mmdebstrap), mmdebstrap, and podman or docker.io (scripts/debian-packages.txt).
# With podman on a cgroup v1 (hybrid) host it writes the settings such hosts need first
# (podman-setup.sh). Offline once the Debian packages are in apt's cache or a local mirror
# (SEQPIPE_DEBIAN_MIRROR).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
engine="" print_tag=0 systemd=0 build_dir="$root/build/release" model="$root/models/speller-t5"
tag="" runtime_tag="localhost/seqpipe-runtime:bookworm"
while [[ $# -gt 0 ]]; do
  case $1 in
    --engine) engine=$2; shift 2 ;;
    --build-dir) build_dir=$(cd "$2" && pwd); shift 2 ;;
    --model) model=$(cd "$2" && pwd); shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --print-content-tag) print_tag=1; shift ;;
    --systemd) systemd=1; shift ;;
    *) echo "usage: $0 [--engine podman|docker] [--build-dir DIR] [--model DIR] [--systemd] [--tag TAG | --print-content-tag]" >&2; exit 2 ;;
  esac
done
binaries=(tools/seqpipe services/gateway/seqpipe-gateway services/tokenizer/seqpipe-tokenizer
          services/batcher/seqpipe-batcher services/encoder/seqpipe-encoder
          services/decoder/seqpipe-decoder services/postprocessor/seqpipe-postprocessor)
if [[ -z "$tag" ]]; then
  tag=localhost/seqpipe:latest
  [[ $systemd == 0 ]] || tag=localhost/seqpipe-systemd:latest
fi
if [[ $systemd == 0 ]]; then
  for b in "${binaries[@]}"; do
    [[ -x "$build_dir/$b" ]] || { echo "$0: $build_dir/$b is not built" >&2; exit 2; }
  done
fi
if [[ $print_tag == 1 ]]; then
  # Each input file's hash under a name that does not depend on where the checkout is.
  {
    if [[ $systemd == 0 ]]; then
      (cd "$build_dir" && sha256sum "${binaries[@]}")
      (cd "$model" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
      (cd "$root" && sha256sum config/pipeline.yaml)
    fi
    (cd "$root" && sha256sum deploy/image/* deploy/compose/runtime-packages.txt)
  } | sha256sum | cut -c1-16 | sed "s|^|${tag%:*}:src-|"
  exit 0
fi
if [[ -z "$engine" ]]; then
  if command -v podman >/dev/null; then engine=podman; elif command -v docker >/dev/null; then engine=docker; fi
fi
for tool in mmdebstrap "$engine"; do
  if [[ -z "$tool" ]] || ! command -v "$tool" >/dev/null; then
    echo "$0: needs mmdebstrap and podman or docker (apt-get install mmdebstrap podman)" >&2
    exit 2
  fi
done
[[ "$engine" == podman ]] && "$(dirname "$0")/podman-setup.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mirror=${SEQPIPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${SEQPIPE_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
packages=$(grep -vE '^\s*(#|$)' "$root/deploy/compose/runtime-packages.txt" | paste -sd, -)

# 1. The runtime root: Debian 12 + updates + security, the runtime libraries, the seqpipe user;
# with --systemd also systemd, which the image boots as root (podman run --systemd=always).
run_as=(--change 'USER=10001')
if [[ $systemd == 1 ]]; then
  packages="$packages,systemd,systemd-sysv" runtime_tag=$tag
  run_as=(--change 'USER=0' --change 'CMD=["/sbin/init"]' --change 'STOPSIGNAL=SIGRTMIN+3')
fi
mmdebstrap --variant=apt --components=main --include="$packages,ca-certificates" \
  --customize-hook='chroot "$1" groupadd --system --gid 10001 seqpipe' \
  --customize-hook='chroot "$1" useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin seqpipe' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  bookworm "$work/runtime.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main"
"$engine" import --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  "${run_as[@]}" "$work/runtime.tar" "$runtime_tag"
if [[ $systemd == 1 ]]; then
  echo "built $tag with $engine: run it with $engine run --systemd=always $tag"
  exit 0
fi

# 2. The product: binaries, model, config on the runtime image.
mkdir -p "$work/ctx/bin" "$work/ctx/model"
for b in "${binaries[@]}"; do cp "$build_dir/$b" "$work/ctx/bin/"; done
cp -r "$model/." "$work/ctx/model/"
# The config `seqpipe up` finds in its working directory (config/pipeline.yaml), serving the
# bundled model: the checkout's, model.dir moved.
sed 's|^  dir: models/speller-t5$|  dir: /var/lib/seqpipe/model|' "$root/config/pipeline.yaml" >"$work/ctx/pipeline.yaml"
grep -q '^  dir: /var/lib/seqpipe/model$' "$work/ctx/pipeline.yaml"
cat >"$work/ctx/Containerfile" <<CONTAINERFILE
FROM $runtime_tag
COPY bin/ /usr/local/bin/
COPY model/ /var/lib/seqpipe/model/
COPY pipeline.yaml /var/lib/seqpipe/config/pipeline.yaml
USER 10001:10001
WORKDIR /var/lib/seqpipe
CMD ["seqpipe", "--help"]
CONTAINERFILE
"$engine" build -t "$tag" -f "$work/ctx/Containerfile" "$work/ctx"
# It serves: the whole pipeline in one container with no network, one request through it.
"$engine" run -d --name seqpipe-image-check --network none "$tag" seqpipe up >/dev/null
trap '"$engine" rm -f seqpipe-image-check >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
answer=""
for _ in $(seq 1 60); do
  answer=$("$engine" exec seqpipe-image-check seqpipe send "teh speling" 2>/dev/null) && break
  sleep 1
done
[[ -n "$answer" ]] || { "$engine" logs seqpipe-image-check | tail -20; echo "$0: the image does not serve" >&2; exit 1; }
echo "the image serves: 'teh speling' -> $answer"
echo "built $tag (on $runtime_tag) with $engine; save it with: $engine save $tag -o seqpipe.tar"
