#!/usr/bin/env bash
# The test command: install the Debian packages, build Release and run every test, then build
# with AddressSanitizer + UndefinedBehaviorSanitizer and run the engine tests under them. Fails
# first if any C++ source differs from .clang-format, and after the Release build if it used a
# file from a Debian package that scripts/debian-packages.txt does not bring (scripts/check-deps.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
echo "== format: clang-format --dry-run -Werror"
find common engine services clients tools bench tests \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
  xargs -0 clang-format --dry-run -Werror
jobs=$(nproc)
for preset in release asan; do
  echo "== $preset: configure, build, test"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  if [ "$preset" = release ]; then
    echo "== dependencies: what the release build used comes from scripts/debian-packages.txt"
    scripts/check-deps.sh --build-dir build/release
  fi
  ctest --preset "$preset" -j "$jobs"
done
