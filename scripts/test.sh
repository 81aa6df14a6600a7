#!/usr/bin/env bash
# The test command: install the Debian packages, build Release and run every test, then build
# with AddressSanitizer + UndefinedBehaviorSanitizer and run the engine tests under them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
jobs=$(nproc)
for preset in release asan; do
  echo "== $preset: configure, build, test"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done
