#!/usr/bin/env bash
# gpu-bundle.sh: carry a build made on one machine to a GPU machine that has
# the NVIDIA driver, cuBLASLt, cuDNN and NCCL but not the rest of our stack
# (no OpenMPI, HDF5, yaml-cpp, Boost, OpenBLAS, oneDNN, protobuf) and no way
# to install it: a machine lent for minutes, a container image made for
# Python, a login-less compute node. Building there would mean carrying every
# -dev package and spending the GPU's minutes on a compiler.
#
#   pack    (here, after `cmake --build build`): one .tar.xz holding
#           - tree/: the build's programs, shared libraries, the GPU tests'
#             executables and every CTestTestfile.cmake (so `ctest -L gpu`
#             runs there), at their paths relative to the repository root;
#           - root/: OpenMPI's runtime (mpiexec, its components, help files,
#             its PMIx) at the absolute paths the library was built with;
#           - lib/: every shared library those load that is not the C
#             runtime, the C++ runtime, the NVIDIA driver, or one of the big
#             NVIDIA libraries the GPU machine must bring (cuBLAS, cuDNN,
#             NCCL; the CUDA runtime is carried: it is small and must match
#             the toolkit we compiled with).
#   unpack  (there, in the repository root): puts tree/ back; where the
#           machine has no Open MPI, copies root/ onto / without replacing
#           anything it has (where it has one, that one runs our programs
#           with its own libraries); finds the machine's cuBLASLt, cuDNN and NCCL
#           (the dynamic linker's cache, the CUDA toolkit, Python wheels),
#           links the build's absolute path to this checkout when they
#           differ (CTestTestfile.cmake and the programs' RUNPATH name it),
#           and writes an environment file to source before running.
#
# Usage: scripts/gpu-bundle.sh pack [--build DIR] [--out FILE] [--level 0-9]
#        scripts/gpu-bundle.sh unpack FILE [--prefix DIR]
# pack's default output is .gpu-bundle/bundle.tar.xz (.gpu-bundle/ is
# ignored by git), compressed at xz level 9 (--level; 0 is fastest);
# unpack's default prefix is /opt/scaletrain-bundle and its environment file
# is PREFIX/env.sh. Test: ctest/cuda/gpu_bundle_test.sh (test_gpu_bundle).
set -euo pipefail
die() { printf 'gpu-bundle: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '/^# Usage:/,/^# ignored/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# Libraries the GPU machine provides itself (never carried): the C runtime
# and dynamic linker, the C++ runtime, the driver, and the big NVIDIA ones.
provided='^(ld-linux[-a-z0-9_]*|linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libnvidia-|libcublas|libcublasLt|libcudnn|libcudnn_[a-z_]*|libnccl|libnvrtc|libnvJitLink)\.so'

# is_elf FILE: the ELF magic, read without a process per file (the walks
# below visit a few hundred files).
is_elf() {
  local magic=
  LC_ALL=C IFS= read -r -d '' -n 4 magic <"$1" 2>/dev/null || true
  [[ $magic == $'\x7fELF' ]]
}

pack() {
  local build=build out=.gpu-bundle/bundle.tar.xz level=9
  while (($#)); do
    case $1 in
      --build) build=${2:?--build needs a directory}; shift 2 ;;
      --out) out=${2:?--out needs a file}; shift 2 ;;
      --level) level=${2:?--level needs 0-9}; shift 2 ;;
      *) die "pack: unknown argument '$1' (valid: --build DIR, --out FILE, --level 0-9)" ;;
    esac
  done
  [[ $level =~ ^[0-9]$ ]] || die "pack: --level '$level' is not an xz level 0-9"
  [[ -f CMakeLists.txt && -d app ]] || die "pack: run from the repository root"
  [[ -f $build/lib/libscaletrain_cuda.so ]] ||
    die "pack: $build/lib/libscaletrain_cuda.so does not exist: configure with nvcc on PATH (cmake --preset cpu or cuda) and build first"
  local repo build_abs
  repo=$(pwd -P)
  build_abs=$(cd "$build" && pwd -P)
  [[ $build_abs == "$repo"/* ]] || die "pack: the build '$build' must lie inside the repository"
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/tree" "$stage/root" "$stage/lib"

  # The build's files, relative to the repository root.
  local rel=${build_abs#"$repo"/} files=()
  local f
  for f in app/scaletrain app/scaletrain-tokenize analysis/scaletrain-analyze \
    analysis/scaletrain-plan analysis/scaletrain-plan-probe; do
    [[ -x $build/$f ]] && files+=("$rel/$f")
  done
  for f in "$build"/lib/*.so "$build"/kernels/cuda/scaletrain-*; do
    [[ -f $f && ! $f =~ \.a$ ]] && files+=("$rel/${f#"$build"/}")
  done
  # The gpu-labelled tests' executables, read from ctest's own listing.
  while read -r f; do
    [[ -x $f && $f == "$build_abs"/* ]] && files+=("$rel/${f#"$build_abs"/}")
  done < <(ctest --test-dir "$build" -L gpu --show-only=json-v1 2>/dev/null |
    python3 -c 'import json,sys
for t in json.load(sys.stdin)["tests"]:
    for a in t.get("command", []): print(a)')
  while read -r f; do files+=("$rel/${f#"$build"/}"); done < <(find "$build" -name CTestTestfile.cmake)
  mapfile -t files < <(printf '%s\n' "${files[@]}" | sort -u)
  for f in "${files[@]}"; do
    mkdir -p "$stage/tree/$(dirname "$f")" && cp -a "$f" "$stage/tree/$f"
  done

  # OpenMPI's runtime at its own absolute paths (the library finds its
  # components and help files there).
  local mpiexec ompi
  mpiexec=$(readlink -f "$(command -v mpiexec)") || die "pack: mpiexec is not on PATH"
  command -v ompi_info >/dev/null || die "pack: ompi_info is not on PATH (only Open MPI is carried)"
  ompi() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1://p" | head -1; }
  local roots=("$mpiexec" "$(ompi bindir)/orted" "$(ompi libdir)" "$(ompi sysconfdir)"
    "$(ompi pkgdatadir)")
  local pmix
  for pmix in /usr/lib/x86_64-linux-gnu/pmix2/lib /usr/lib/x86_64-linux-gnu/pmix2/share; do
    [[ -d $pmix ]] && roots+=("$pmix")
  done
  for f in "${roots[@]}"; do
    [[ -e $f ]] || continue
    mkdir -p "$stage/root$(dirname "$f")" && cp -a "$f" "$stage/root$f"
  done
  # Development files are not needed to run, nor OpenSHMEM, Fortran, Java,
  # or the components for fabrics that one GPU machine's ranks do not use
  # (UCX, libfabric, PSM, InfiniBand verbs; MPI between its ranks goes
  # through shared memory, as on one node of a cluster, and NCCL carries the
  # GPU collectives); leaving them out keeps the bundle within what a lent
  # machine's call carries (their libraries would double its size).
  find "$stage/root" \( -name include -o -name pkgconfig -o -name '*.a' -o -name '*.la' \
    -o -name '*java*' -o -name '*mpifh*' -o -name '*usempi*' -o -name '*oshmem*' \
    -o -regex '.*/\(mca\|libmca_common\)_[a-z0-9_]*\(ucx\|ofi\|psm\|psm2\|openib\|verbs\|usnic\|munge\)[^/]*' \
    -o -regex '.*/mca_\(mtl\|spml\|sshmem\|memheap\|scoll\|atomic\)_[^/]*' -o -name 'mca_pml_cm.so' \) \
    -prune -exec rm -rf {} +
  local bindir
  bindir=$stage/root$(dirname "$mpiexec")
  for f in mpiexec mpirun; do ln -sf "$(basename "$mpiexec")" "$bindir/$f"; done

  # Every shared library the carried files load, except those provided there.
  local elf lib name n=0
  while read -r elf; do
    is_elf "$elf" || continue
    while read -r lib; do
      name=${lib##*/}
      [[ $name =~ $provided ]] && continue
      [[ $lib == "$build_abs"/* ]] && continue
      [[ -e $stage/lib/$name ]] && continue
      cp -L "$lib" "$stage/lib/$name"
      n=$((n + 1))
    done < <(ldd "$elf" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p')
  done < <(find "$stage/tree" "$stage/root" -type f \( -perm -u+x -o -name '*.so*' \))

  printf 'repo=%s\nbuild=%s\npacked=%s\ncommit=%s\n' "$repo" "$rel" "$(date -u +%FT%TZ)" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >"$stage/MANIFEST"
  mkdir -p "$(dirname "$out")"
  [[ $out == .gpu-bundle/* ]] && printf '*\n' >.gpu-bundle/.gitignore
  tar -C "$stage" -cf - . | xz -T0 "-$level" >"$out"
  printf 'gpu-bundle: %s: %d build files, %d libraries, OpenMPI from %s; %s\n' "$out" \
    "${#files[@]}" "$n" "$(ompi libdir)" "$(du -h "$out" | cut -f1)"
}

unpack() {
  local file=${1:-} prefix=/opt/scaletrain-bundle
  [[ -n $file ]] || usage
  shift
  while (($#)); do
    case $1 in
      --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
      *) die "unpack: unknown argument '$1' (valid: --prefix DIR)" ;;
    esac
  done
  [[ -f $file ]] || die "unpack: '$file' does not exist (make it with: scripts/gpu-bundle.sh pack)"
  [[ -f CMakeLists.txt && -d app ]] || die "unpack: run from the repository root"
  mkdir -p "$prefix"
  xz -dc "$file" | tar -C "$prefix" -xf - || die "unpack: '$file' is not a gpu-bundle archive"
  [[ -f $prefix/MANIFEST ]] || die "unpack: '$file' has no MANIFEST (not made by gpu-bundle.sh pack)"
  local repo
  repo=$(sed -n 's/^repo=//p' "$prefix/MANIFEST")
  cp -a "$prefix/tree/." .
  # The build's absolute path: CTestTestfile.cmake and RUNPATH name it.
  if [[ $(pwd -P) != "$repo" ]]; then
    if [[ -e $repo ]]; then
      echo "gpu-bundle: $repo exists here and is not this checkout; tests that name it will not find the build" >&2
    else
      mkdir -p "$(dirname "$repo")" && ln -s "$(pwd -P)" "$repo"
      echo "gpu-bundle: linked $repo -> $(pwd -P)"
    fi
  fi
  # Our libraries come first (LD_LIBRARY_PATH, through lib-active/): they
  # were built together, and a same-soname library of the machine's may be
  # another release (HDF5 aborts when its headers and library differ).
  # Except where the machine has an Open MPI of its own (same library ABI,
  # libmpi.so.40): then its mpiexec, components and PMIx run our programs,
  # and every library its Open MPI loads is left to the machine (seen: the
  # machine's PMIx component resolving against our older libpmix).
  local f n own=() mpi_libs="" own_mpi=0 libmpi
  libmpi=$(ldconfig -p | sed -n 's/.*libmpi\.so\.40 .*=> //p' | head -1)
  if [[ -n $libmpi ]]; then
    own_mpi=1
    mpi_libs=$( {
      ldd "$libmpi"
      for f in "$(readlink -f "$(command -v mpiexec 2>/dev/null || echo /nonexistent)")" \
        $(find "$(dirname "$(readlink -f "$libmpi")")" /usr/lib/x86_64-linux-gnu/openmpi \
          -maxdepth 4 -name 'mca_*.so' 2>/dev/null); do
        [[ -f $f ]] && ldd "$f"
      done
    } 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) => \/.*/\1/p' | sort -u)
  fi
  rm -rf "$prefix/lib-active" && mkdir -p "$prefix/lib-active"
  for f in "$prefix"/lib/*; do
    n=$(basename "$f")
    if grep -qx -- "$n" <<<"$mpi_libs"; then own+=("$n"); else ln -s "$f" "$prefix/lib-active/$n"; fi
  done
  ((${#own[@]} == 0)) || echo "gpu-bundle: left to the machine's Open MPI: ${own[*]}"
  # Open MPI's runtime onto /, unless the machine has its own.
  if ((own_mpi)); then
    echo "gpu-bundle: the machine has its own Open MPI ($(command -v mpiexec || echo 'no mpiexec on PATH')); using it"
  else
    local kept=0
    while read -r f; do
      f=${f#"$prefix/root"}
      if [[ -e $f || -L $f ]]; then
        kept=$((kept + 1))
        ((kept <= 5)) && echo "gpu-bundle: kept the machine's own $f"
      else
        mkdir -p "$(dirname "$f")" && cp -a "$prefix/root$f" "$f"
      fi
    done < <(find "$prefix/root" \( -type f -o -type l \))
    ((kept > 5)) && echo "gpu-bundle: kept $kept of the machine's own files in all"
  fi
  # The NVIDIA libraries the machine brings.
  local dirs=() want miss=() d
  for want in libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    d=$(ldconfig -p | sed -n "s/.*$want .*=> //p" | head -1)
    [[ -z $d ]] && d=$(find /usr/local /opt /usr/lib -maxdepth 9 -name "$want" 2>/dev/null | head -1)
    if [[ -z $d ]]; then miss+=("$want"); continue; fi
    d=$(dirname "$d")
    echo "gpu-bundle: $want in $d"
    [[ " ${dirs[*]} " == *" $d "* ]] || dirs+=("$d")
  done
  local path=$prefix/lib-active
  for d in "${dirs[@]}"; do path+=":$d"; done
  # Open MPI's mpiexec first on PATH: another MPI's launcher (a Python
  # wheel's, say) cannot start ranks linked against Open MPI.
  local mpiexec
  mpiexec=$(find "$prefix/root" -name orterun -type f | head -1)
  mpiexec=${mpiexec#"$prefix/root"}
  mkdir -p "$prefix/bin"
  [[ -x $mpiexec ]] && for f in mpiexec mpirun; do ln -sf "$mpiexec" "$prefix/bin/$f"; done
  cat >"$prefix/env.sh" <<EOF
# written by scripts/gpu-bundle.sh unpack; source before running the build
export LD_LIBRARY_PATH=$path\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=$prefix/bin:\$PATH
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
  echo "gpu-bundle: environment in $prefix/env.sh"
  # What still does not resolve: a library not found, or a symbol the
  # trainer needs that no library loaded for it defines.
  local bad=0 build
  build=$(sed -n 's/^build=//p' "$prefix/MANIFEST")
  LD_LIBRARY_PATH=$path ldd "$build/lib/libscaletrain_cuda.so" | grep "not found" && bad=1
  LD_LIBRARY_PATH=$path ldd -r "$build/app/scaletrain" 2>&1 | grep -E "not found|undefined symbol" && bad=1
  ((${#miss[@]} == 0)) || { echo "gpu-bundle: not found on this machine: ${miss[*]}" >&2; bad=1; }
  return $bad
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  unpack) shift; unpack "$@" ;;
  *) usage ;;
esac
