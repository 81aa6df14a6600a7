#!/usr/bin/env bash
# Shows that the carried tree (.gpu-carry/, scripts/gpu-carry.sh) runs from its own carried libraries on a
# machine with none of our Debian libraries, as the GPU machine is: builds a minimal Debian 12
# root (mmdebstrap minbase, plus python3 as the GPU machine has one, without torch), copies in
# what a GPU machine is sent (the working tree's files and .gpu-carry/) under another path than
# the build's, and runs scripts/gpu-check.sh there under chroot (its CPU part: no GPU there).
#   sudo scripts/gpu-clean-root.sh [ROOT_DIR]     (default /tmp/seqpipe-clean-root; kept, reused)
# Prints the packages the root holds of ours (none) and the check's report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${1:-/tmp/seqpipe-clean-root}
[ -f .gpu-carry/MANIFEST ] || { echo "gpu-clean-root: run scripts/gpu-carry.sh first" >&2; exit 1; }

if [ ! -x "$dir/bin/bash" ]; then
  # This host's Debian mirror (deb822 sources), as apt here uses it.
  mirrors=()
  while read -r uri suites; do
    for s in $suites; do mirrors+=("deb $uri $s main"); done
  done < <(awk '/^URIs:/ {u = $2} /^Suites:/ {$1 = ""; print u, $0}' /etc/apt/sources.list.d/debian.sources)
  mmdebstrap --variant=minbase --include=python3 --mode=root bookworm "$dir.tmp" "${mirrors[@]}"
  mv "$dir.tmp" "$dir"
fi

# What the device tool sends: tracked and untracked-not-ignored files, and the carried folder.
dest=/src/seqpipe
rm -rf "${dir:?}$dest" "$dir/out"
mkdir -p "$dir$dest" "$dir/out"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$dir$dest"
cp -a .gpu-carry "$dir$dest/"

mount -t proc proc "$dir/proc"
mount --bind /dev "$dir/dev"
# The GPU machine has the CUDA toolkit's libraries; this one's stand in for them (read-only).
cuda_mounted=0
if [ -d /usr/local/cuda ]; then
  mkdir -p "$dir/usr/local/cuda"
  mount --bind -o ro "$(readlink -f /usr/local/cuda)" "$dir/usr/local/cuda" && cuda_mounted=1
fi
cleanup() {
  [ "$cuda_mounted" = 0 ] || umount "$dir/usr/local/cuda"
  umount "$dir/dev" "$dir/proc"
}
trap cleanup EXIT

echo "== the clean root: $(chroot "$dir" cat /etc/debian_version), $(chroot "$dir" dpkg -l | grep -c '^ii') packages"
echo "-dev packages: $(chroot "$dir" dpkg -l | awk '/^ii/ && $2 ~ /-dev(:|$)/' | wc -l)"
ours=$(awk '$1 == "packages" {$1 = ""; print}' .gpu-carry/MANIFEST)
base=$(for p in $ours; do chroot "$dir" dpkg -s "$p" >/dev/null 2>&1 && echo "$p"; done | tr '\n' ' ')
echo "of the $(echo $ours | wc -w) carried packages, in the root's base system already: ${base:-none}"
echo "(the steps load the carried copies first: gpu-check's libraries step lists what comes from elsewhere)"
echo "python3: $(chroot "$dir" python3 -c 'import sys; print(sys.version.split()[0])'); torch: $(chroot "$dir" python3 -c 'import torch' 2>&1 | tail -1)"
echo "== chroot $dir bash $dest/scripts/gpu-check.sh (OUT=/out)"
chroot "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root OUT=/out bash "$dest/scripts/gpu-check.sh" >/dev/null || {
  echo "gpu-check.sh failed (exit $?)"; cat "$dir/out/gpu-check.log"; exit 1; }
cat "$dir/out/gpu-report.md"
