#!/usr/bin/env bash
# Prepares a oneDNN include folder from a local oneDNN git checkout, for the
# onednn3_syntax test (ctest/model): `git archive TAG include`, then writes the
# headers oneDNN's CMake would generate (dnnl_config.h, dnnl_version.h,
# dnnl_version_hash.h) for a CPU-only OpenMP build. No network, no build of
# oneDNN. --dnnl-hpp-only keeps only the headers <oneapi/dnnl/dnnl.hpp>
# includes (the preprocessor's list): that is how the committed folder
# ctest/model/onednn-3.7.1/include (the test's default, see its README) was made.
#   scripts/onednn-headers.sh ONEDNN_REPO TAG OUT_DIR [--dnnl-hpp-only]
#   cmake --preset ci -DSCALETRAIN_ONEDNN3_INCLUDE=OUT_DIR   (or the environment variable)
set -euo pipefail
usage="usage: onednn-headers.sh ONEDNN_REPO TAG OUT_DIR [--dnnl-hpp-only]"
repo=${1:?$usage}
tag=${2:?$usage}
out=${3:?$usage}
only=${4:-}
[[ -z $only || $only == --dnnl-hpp-only ]] || { echo "onednn-headers.sh: unknown option '$only'; $usage" >&2; exit 2; }
[[ $tag =~ ^v([0-9]+)\.([0-9]+)(\.([0-9]+))?$ ]] ||
  { echo "onednn-headers.sh: tag '$tag' is not vMAJOR.MINOR[.PATCH]" >&2; exit 2; }
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} patch=${BASH_REMATCH[4]:-0}
rm -rf "$out"
mkdir -p "$out"
git -C "$repo" archive "$tag" include |
  tar -x -C "$out" --strip-components=1
d=$out/oneapi/dnnl
[[ -f $d/dnnl_config.h.in ]] || { echo "onednn-headers.sh: $d/dnnl_config.h.in missing" >&2; exit 1; }
# CPU runtime OpenMP, no GPU; every optional feature off, every primitive and ISA built.
sed -E -e 's/^#cmakedefine (DNNL_CPU_THREADING_RUNTIME|DNNL_CPU_RUNTIME) .*/#define \1 DNNL_RUNTIME_OMP/' \
  -e 's/^#cmakedefine DNNL_GPU_RUNTIME .*/#define DNNL_GPU_RUNTIME DNNL_RUNTIME_NONE/' \
  -e 's/^#cmakedefine DNNL_GPU_VENDOR .*/#define DNNL_GPU_VENDOR DNNL_VENDOR_NONE/' \
  -e 's/^#cmakedefine01 (DNNL_EXPERIMENTAL[A-Z_]*)$/#define \1 0/' \
  -e 's/^#cmakedefine01 ([A-Z0-9_]+)$/#define \1 1/' \
  -e 's/^#cmakedefine ([A-Z0-9_]+).*/\/* #undef \1 *\//' \
  "$d/dnnl_config.h.in" >"$d/dnnl_config.h"
sed -e "s/@DNNL_VERSION_MAJOR@/$major/" -e "s/@DNNL_VERSION_MINOR@/$minor/" \
  -e "s/@DNNL_VERSION_PATCH@/$patch/" -e 's/@DNNL_VERSION_HASH@/N\/A/' \
  "$d/dnnl_version.h.in" >"$d/dnnl_version.h"
if [[ -f $d/dnnl_version_hash.h.in ]]; then
  sed -e 's/@DNNL_VERSION_HASH@/N\/A/' "$d/dnnl_version_hash.h.in" >"$d/dnnl_version_hash.h"
fi
if grep -nE '@[A-Z_]+@|#cmakedefine' "$d/dnnl_config.h" "$d/dnnl_version.h"; then
  echo "onednn-headers.sh: unreplaced template lines above" >&2
  exit 1
fi
if [[ -n $only ]]; then
  keep=$(echo '#include <oneapi/dnnl/dnnl.hpp>' | ${CXX:-c++} -std=c++17 -x c++ -M -I"$out" - |
    tr ' \\' '\n\n' | sed -n "s|^$out/||p" | sort -u)
  [[ -n $keep ]] || { echo "onednn-headers.sh: the preprocessor listed no header of $out" >&2; exit 1; }
  find "$out" -type f | sed "s|^$out/||" | sort | comm -23 - <(echo "$keep") |
    while read -r f; do rm "$out/$f"; done
fi
echo "oneDNN $major.$minor.$patch headers in $out"
