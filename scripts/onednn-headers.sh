#!/usr/bin/env bash
# Prepares a oneDNN include folder from a local oneDNN git checkout, for the
# onednn3_syntax test (ctest/model): `git archive TAG include`, then writes the
# headers oneDNN's CMake would generate (dnnl_config.h, dnnl_version.h,
# dnnl_version_hash.h) for a CPU-only OpenMP build. No network, no build of
# oneDNN; the folder is for compiling against, never committed.
#   scripts/onednn-headers.sh ONEDNN_REPO TAG OUT_DIR
#   cmake --preset ci -DSCALETRAIN_ONEDNN3_INCLUDE=OUT_DIR   (or the environment variable)
set -euo pipefail
repo=${1:?usage: onednn-headers.sh ONEDNN_REPO TAG OUT_DIR}
tag=${2:?usage: onednn-headers.sh ONEDNN_REPO TAG OUT_DIR}
out=${3:?usage: onednn-headers.sh ONEDNN_REPO TAG OUT_DIR}
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
echo "oneDNN $major.$minor.$patch headers in $out"
