#!/usr/bin/env bash
# A newcomer's machine, made on this one: a minimal Debian 12 (bookworm) root with only git and
# ca-certificates, this repository's HEAD cloned into it (committed files only), and the README's
# command run inside it: scripts/run.sh, or scripts/test.sh with --test. Prints each command's
# elapsed time. Run it before landing a change to the dependencies or the build files: a package
# missing from scripts/debian-packages.txt shows up here and not on a developer's machine.
#   scripts/clean-room.sh [--test] [--keep] [--dir DIR]
#     --test      run scripts/test.sh instead of scripts/run.sh (about 30 min on 2 cores)
#     --keep      keep the root afterwards (default: delete it)
#     --dir DIR   where to make the root (default: a new directory under /var/tmp)
# Needs root and mmdebstrap (a developer tool, not a seqpipe dependency: apt-get install mmdebstrap).
# The root uses this machine's apt sources (a mirror, if the host uses one), bookworm's main only.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

command_name=scripts/run.sh
keep=0
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --test) command_name=scripts/test.sh ;;
    --keep) keep=1 ;;
    --dir) dir="$2"; shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "clean-room: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "clean-room: needs root (mmdebstrap, chroot)" >&2; exit 2; }
command -v mmdebstrap >/dev/null || { echo "clean-room: needs mmdebstrap: apt-get install mmdebstrap" >&2; exit 2; }

# The host's Debian sources, so a machine behind a mirror gets the same one. Files naming other
# suites (third-party repositories) are left out: a newcomer's Debian 12 does not have them.
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -qE '^[^#]*\bbookworm' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { echo "clean-room: no bookworm apt sources under /etc/apt" >&2; exit 2; }

if [ -z "$dir" ]; then
  dir=$(mktemp -d /var/tmp/seqpipe-clean-room.XXXXXX)
elif [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
  # Never a directory with something in it: the cleanup below deletes the root.
  echo "clean-room: $dir is not empty" >&2
  exit 2
fi
cleanup() {
  if [ "$keep" -eq 1 ]; then
    echo "clean-room: kept $dir (chroot $dir /bin/bash; the tree is /root/seqpipe)"
  else
    rm -rf --one-file-system "$dir"
  fi
}
trap cleanup EXIT

elapsed() { # prints "NAME: N s" after running the rest of the arguments
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "clean-room: $name: $((SECONDS - start)) s (exit $rc)"
  return $rc
}

# mmdebstrap wants an empty directory; components "main" only (contrib/non-free are not needed).
rmdir "$dir" 2>/dev/null || true
elapsed "mmdebstrap (minbase + git, ca-certificates)" \
  mmdebstrap --quiet --variant=minbase --include=git,ca-certificates --components=main \
  bookworm "$dir" "${sources[@]}"

# Services a package's postinst would start (prometheus) would run on this host's network and
# outlive the command: a chroot's usual policy says no.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod 755 "$dir/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$dir/etc/resolv.conf"

sha=$(git -C "$repo" rev-parse HEAD)
git clone --quiet --no-hardlinks "$repo" "$dir/root/seqpipe"
git -C "$dir/root/seqpipe" checkout --quiet --detach "$sha"
echo "clean-room: $dir/root/seqpipe at $(git -C "$repo" log -1 --format='%h %s' "$sha")"

# A private mount and pid namespace: /proc, /dev, /dev/shm and /sys go away with it, and so does
# every process the command left behind, whatever happens to this script.
inside() {
  unshare --mount --pid --fork --propagation private bash -c '
    set -e
    root=$1; shift
    # The root a mount point of its own, as / is on a machine: `ip netns add` (tests/deploy)
    # remounts / and fails in a bare directory.
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs tmpfs "$root/dev/shm"
    mount -t sysfs sysfs "$root/sys"
    mount -t tmpfs tmpfs "$root/tmp"
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' inside "$dir" "$@"
}
elapsed "$command_name" inside /bin/bash -c "cd /root/seqpipe && $command_name"
