#!/usr/bin/env bash
# kernels/cpu/gemm_onednn.cpp compiles against oneDNN 3.x headers (its 3.x
# code path; the build itself compiles the 2.x one against the installed
# libdnnl-dev). The folder comes from SCALETRAIN_ONEDNN3_INCLUDE (the CMake
# cache variable, passed as $4, else the environment variable); without one,
# the oneDNN 3.7.1 headers committed in ctest/model/onednn-3.7.1/include (so
# the check runs in CI, with no network). scripts/onednn-headers.sh makes
# such a folder for another 3.x tag.
#   onednn3_syntax.sh CXX SOURCE_DIR GENERATED_DIR [ONEDNN3_INCLUDE]
set -uo pipefail
cxx=$1 src=$2 gen=$3
inc=${4:-${SCALETRAIN_ONEDNN3_INCLUDE:-$src/ctest/model/onednn-3.7.1/include}}
v=$inc/oneapi/dnnl/dnnl_version.h
[[ -f $v ]] || { echo "FAIL: $inc is not a oneDNN include folder ($v missing)"; exit 1; }
major=$(awk '$2 == "DNNL_VERSION_MAJOR" {print $3}' "$v")
minor=$(awk '$2 == "DNNL_VERSION_MINOR" {print $3}' "$v")
[[ $major == 3 ]] || { echo "FAIL: $inc holds oneDNN $major.$minor, not 3.x"; exit 1; }
# -I puts the folder before the system's /usr/include (Debian's 2.6 headers).
if "$cxx" -std=c++20 -Wall -Wextra -Wno-unused-parameter -Werror -fsyntax-only -I"$inc" \
  -I"$src/lib" -I"$src" -I"$gen" "$src/kernels/cpu/gemm_onednn.cpp"; then
  echo "ok: gemm_onednn.cpp compiles against oneDNN $major.$minor headers in $inc"
else
  echo "FAIL: gemm_onednn.cpp does not compile against oneDNN $major.$minor headers in $inc"
  exit 1
fi
