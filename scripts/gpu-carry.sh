#!/usr/bin/env bash
# Builds what the one-call GPU check (scripts/gpu-check.sh, docs/dev/GPU-CHECK.md) runs and lays it out in
# .gpu-carry/ (git-ignored), the folder a GPU machine is sent with the working tree:
#   bin.tar.xz  the stripped executables (CMake preset gpu: CUDA on, -march=x86-64-v3), in one
#               solid archive: they share the engine, so they compress to a sixth
#   libs.tar.xz the shared libraries they load, out of their Debian runtime packages (the .debs'
#               libraries only, in one solid archive: a sixth smaller than the .debs themselves)
#   MANIFEST    where they were built (absolute paths compiled into the tests), what is there
# The GPU machine has glibc, libstdc++ and the CUDA toolkit but none of our Debian libraries and
# no apt or network, so the libraries travel; compressed together, since the working tree and the
# carried folder together must stay under 64 MiB.
#   scripts/gpu-carry.sh            (JOBS=N for the build; default 2)
# GPU_CARRY_PRESET=release carries the release build instead (this machine's -march; also CUDA
# on where the toolkit is): to prove gpu-check.sh end to end here without building the gpu preset.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
carry=.gpu-carry
preset=${GPU_CARRY_PRESET:-gpu}
build=build/$preset
limit_mib=63  # the device tool's 64 MiB for tree + carry, less a margin for files added later

export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi

# The GPU test executables: the gtest targets whose tests carry the label gpu (read from the
# CMake files, since gtest_discover_tests only lists tests once the executable is built); with
# none, the engine's own tests, which instantiate their op, batching, reference and allocation
# tests on every device (the GPU's skip themselves where there is none).
mapfile -t gpu_tests < <(cat $(find tests engine -name CMakeLists.txt) | tr '\n' ' ' |
  grep -oE 'gtest_discover_tests\([A-Za-z0-9_-]+[^)]*\)' | grep -E 'LABELS[^)]*gpu' |
  sed -E 's/gtest_discover_tests\(([A-Za-z0-9_-]+).*/\1/' | sort -u)
[ "${#gpu_tests[@]}" -gt 0 ] || gpu_tests=(engine_tests engine_allocation_tests)
tools=(seqpipe-generate seqpipe-mkmodel seqpipe seqpipe-bench engine_bench)
services=(seqpipe-gateway seqpipe-tokenizer seqpipe-batcher seqpipe-encoder seqpipe-decoder seqpipe-postprocessor)
targets=("${gpu_tests[@]}" "${tools[@]}" "${services[@]}")

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "${JOBS:-2}" --target "${targets[@]}"

rm -rf "$carry"
mkdir -p "$carry"
bin=$(mktemp -d /tmp/gpu-carry.XXXXXX)/bin
mkdir "$bin"
trap 'rm -rf "$(dirname "$bin")"' EXIT
for t in "${targets[@]}"; do
  exe=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$exe" ] || { echo "gpu-carry: no executable $t under $build" >&2; exit 1; }
  strip -o "$bin/$t" "$exe"
  echo "$t ${exe#"$build"/}" >>"$carry/bin-paths"
done
# The CUDA backend module, beside the programs: the engine loads it from there first.
module=$build/engine/libseqpipe_engine_cuda.so
[ -f "$module" ] || { echo "gpu-carry: no $module (is SEQPIPE_WITH_CUDA on?)" >&2; exit 1; }
strip --strip-unneeded -o "$bin/$(basename "$module")" "$module"
tar -C "$(dirname "$bin")" -cf - bin | xz -9e -T1 >"$carry/bin.tar.xz"

# Every shared library the executables load, and the Debian package holding it. glibc, the
# GCC runtime and CUDA's own libraries are on the GPU machine already (newer there).
skip='^(libc6|libstdc\+\+6|libgcc-s1)$'
declare -A packages=()
missing=0
while read -r lib path; do
  # CUDA's libraries and the driver's: the GPU machine's own (this one may have no driver).
  case "$lib" in libcuda.so* | libcudart.so* | libcublas* | libcusparse* | libcurand* | libcufft* | libcusolver* | libnvidia* | libnvrtc* | libnvJitLink*) continue ;; esac
  if [ "$path" = "not" ]; then echo "gpu-carry: $lib is not found here" >&2; missing=1; continue; fi
  case "$path" in /usr/local/cuda*) continue ;; esac
  real=$(readlink -f "$path")
  pkg=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$real" 2>/dev/null || true)
  pkg=${pkg%%:*}
  [ -n "$pkg" ] || { echo "gpu-carry: no Debian package holds $path" >&2; missing=1; continue; }
  [[ $pkg =~ $skip ]] || packages[$pkg]=1
done < <(for b in "$bin"/*; do ldd "$b"; done | awk '$2 == "=>" {print $1, $3}' | sort -u)
[ "$missing" = 0 ] || exit 1

# The packages' shared libraries (and their links), without their docs, in one solid archive.
debs=$(dirname "$bin")/debs
mkdir -p "$debs/root"
(cd "$debs" && apt-get -o APT::Sandbox::User=root download "${!packages[@]}" >/dev/null)
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$debs/root"; done
(cd "$debs/root" && find . -name '*.so*' \( -type f -o -type l \) -print0 | sort -z |
  tar --null -T - -cf - | xz -9e -T2) >"$carry/libs.tar.xz"

{
  echo "source_dir $root"
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%FT%TZ) preset $preset"
  echo "build_dir $build"
  echo "gpu_tests ${gpu_tests[*]:-}"
  echo "packages $(cd "$debs" && ls -- *.deb | sed 's/_amd64.deb$//' | tr '\n' ' ')"
} >"$carry/MANIFEST"
sed 's/^/path /' "$carry/bin-paths" >>"$carry/MANIFEST"
rm "$carry/bin-paths"

# What travels: tracked and untracked-not-ignored files, plus the carried folder.
tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
carry_bytes=$(du -sb "$carry" | cut -f1)
total_mib=$(( (tree_bytes + carry_bytes) / 1048576 ))
echo "gpu-carry: $carry: ${#targets[@]} executables ($(du -sh "$bin" | cut -f1)) in bin.tar.xz ($(du -sh "$carry/bin.tar.xz" | cut -f1)), the libraries of ${#packages[@]} packages in libs.tar.xz ($(du -sh "$carry/libs.tar.xz" | cut -f1)): $((carry_bytes / 1048576)) MiB"
echo "gpu-carry: the GPU test executables: ${gpu_tests[*]}"
echo "gpu-carry: working tree $((tree_bytes / 1048576)) MiB + $carry $((carry_bytes / 1048576)) MiB = $total_mib MiB travel (limit ${limit_mib})"
if [ "$total_mib" -gt "$limit_mib" ]; then
  echo "gpu-carry: too large to travel" >&2
  exit 1
fi
