#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/debian-packages.txt (skips apt when all are present).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' "$here/debian-packages.txt")
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for line in "${pkgs[@]}"; do
  # "a | b": present when any is installed; else a is installed.
  read -ra alternatives <<<"${line//|/ }"
  present=0
  for p in "${alternatives[@]}"; do installed "$p" && present=1 && break; done
  [ "$present" = 1 ] || missing+=("${alternatives[0]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} Debian packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
