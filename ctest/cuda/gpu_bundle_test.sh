#!/usr/bin/env bash
# test_gpu_bundle: scripts/gpu-bundle.sh packs this build so that it runs on a
# machine without our packages, and unpacks it into a working environment.
#  - pack: the archive holds the CUDA backend library, the trainer, every
#    gpu-labelled test's executable and every CTestTestfile.cmake; Open MPI's
#    launcher and components; and no library the GPU machine brings itself
#    (C/C++ runtimes, driver, cuBLAS, cuDNN, NCCL).
#  - closure, read independently of pack's ldd walk: every DT_NEEDED of every
#    carried ELF file (readelf) is carried too, or is one the machine brings.
#  - unpack, into a scratch checkout: on a machine with its own Open MPI (as
#    this one) no Open MPI library of ours is put on LD_LIBRARY_PATH; the
#    environment it writes runs the unpacked trainer, alone and under
#    mpiexec with 2 ranks.
#  - bad input is named: a file that is not an archive, a build that does
#    not exist, an xz level out of range.
# Usage: gpu_bundle_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$(cd "${1:?usage: gpu_bundle_test.sh BUILD_DIR SOURCE_DIR}" && pwd -P)
src=$(cd "${2:?usage: gpu_bundle_test.sh BUILD_DIR SOURCE_DIR}" && pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cd "$src" || exit 1
rel=${build#"$src"/}
if [[ $rel == "$build" ]]; then
  echo "skipped: the build $build is not inside the source tree $src (pack needs it there)"
  exit 77
fi

# ---- pack (fastest compression: the test is about contents, not size)
out=$(bash scripts/gpu-bundle.sh pack --build "$build" --out "$tmp/b.tar.xz" --level 0 2>&1) ||
  { echo "$out"; fail "pack exited non-zero"; exit 1; }
echo "$out"
mkdir -p "$tmp/x"
xz -dc "$tmp/b.tar.xz" | tar -C "$tmp/x" -xf - || { fail "the archive does not extract"; exit 1; }
for f in "$rel/lib/libscaletrain_cuda.so" "$rel/app/scaletrain" "$rel/app/scaletrain-tokenize" \
  "$rel/CTestTestfile.cmake"; do
  [[ -e $tmp/x/tree/$f ]] || fail "tree/$f missing"
done
while read -r exe; do
  [[ $exe == "$build"/* ]] || continue
  [[ -e $tmp/x/tree/$rel/${exe#"$build"/} ]] || fail "gpu test executable ${exe#"$build"/} missing"
done < <(ctest --test-dir "$build" -L gpu --show-only=json-v1 2>/dev/null |
  python3 -c 'import json,sys
for t in json.load(sys.stdin)["tests"]:
    for a in t.get("command", []): print(a)')
[[ -n $(find "$tmp/x/root" -name orterun -type f) ]] || fail "Open MPI's launcher (orterun) missing"
[[ -n $(find "$tmp/x/root" -name 'mca_pml_ob1.so') ]] || fail "Open MPI's components missing"
[[ -f $tmp/x/lib/libhdf5_serial.so.103 || -n $(find "$tmp/x/lib" -name 'libhdf5*') ]] ||
  fail "HDF5 not carried"
# What a GPU machine brings itself: gpu-bundle.sh's own list, read from it.
provided=$(sed -n "s/^provided='\(.*\)'$/\1/p" scripts/gpu-bundle.sh)
[[ -n $provided ]] || { fail "no provided= list in scripts/gpu-bundle.sh"; exit 1; }
for f in "$tmp"/x/lib/*; do
  n=${f##*/}
  [[ $n =~ $provided ]] && fail "carried $n, which the GPU machine brings itself"
done

# ---- closure by DT_NEEDED
declare -A have=()
for f in "$tmp"/x/lib/* "$tmp/x/tree/$rel"/lib/*; do have[${f##*/}]=1; done
missing=0
while read -r elf; do
  magic=
  LC_ALL=C IFS= read -r -d '' -n 4 magic <"$elf" 2>/dev/null
  [[ $magic == $'\x7fELF' ]] || continue
  while read -r need; do
    [[ $need =~ $provided ]] && continue
    if [[ -z ${have[$need]:-} ]]; then
      ((missing < 10)) && echo "  ${elf#"$tmp"/x/} needs $need, not carried"
      missing=$((missing + 1))
    fi
  done < <(readelf -d "$elf" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done < <(find "$tmp/x/tree" "$tmp/x/root" "$tmp/x/lib" -type f)
((missing == 0)) || fail "$missing needed libraries not carried"

# ---- unpack into a scratch checkout (a machine with its own Open MPI: nothing goes to /)
co=$tmp/co
mkdir -p "$co/app" && cp "$src/CMakeLists.txt" "$co/"
if ! (cd "$co" && bash "$src/scripts/gpu-bundle.sh" unpack "$tmp/b.tar.xz" --prefix "$tmp/p") \
  >"$tmp/unpack.txt" 2>&1; then
  # The NVIDIA libraries may be absent on a CPU-only machine; everything else must resolve.
  grep -v "not found on this machine: lib\(cublasLt\|cudnn\|nccl\)" "$tmp/unpack.txt" |
    grep -q "not found\|undefined symbol\|gpu-bundle: unpack" && fail "unpack: $(cat "$tmp/unpack.txt")"
fi
cat "$tmp/unpack.txt"
[[ -f $tmp/p/env.sh ]] || { fail "unpack wrote no env.sh"; exit 1; }
[[ -x $co/$rel/app/scaletrain && -f $co/$rel/lib/libscaletrain_cuda.so ]] ||
  fail "unpack did not restore $rel in the checkout"
if ldconfig -p | grep "libmpi\.so\.40 " >/dev/null; then
  [[ -e $tmp/p/lib-active/libmpi.so.40 ]] && fail "our libmpi is on LD_LIBRARY_PATH beside the machine's own Open MPI"
  [[ -e $tmp/p/lib-active/libpmix.so.2 ]] && fail "our libpmix is on LD_LIBRARY_PATH beside the machine's own Open MPI"
fi
[[ -e $tmp/p/lib-active/libhdf5_serial.so.103 ]] || fail "carried HDF5 not on LD_LIBRARY_PATH"
(
  # shellcheck disable=SC1091
  source "$tmp/p/env.sh"
  # ldd's whole output first: grep -q closing the pipe early makes ldd die
  # of SIGPIPE, which pipefail reports as a failure.
  libs=$(ldd "$co/$rel/app/scaletrain")
  [[ $libs == *"$tmp/p/lib-active/libhdf5"* ]] ||
    { echo "FAIL: the unpacked trainer does not load the carried HDF5"; exit 1; }
  "$co/$rel/app/scaletrain" --config "$src/configs/models/tiny.yaml" --set train.steps=2 \
    --set runtime.cpu_peak_gflops=1 --out "$tmp/run1" >"$tmp/run1.txt" 2>&1 ||
    { cat "$tmp/run1.txt"; echo "FAIL: the unpacked trainer failed"; exit 1; }
  mpiexec --oversubscribe --bind-to none -n 2 "$co/$rel/app/scaletrain" \
    --config "$src/configs/models/tiny.yaml" --set train.steps=2 --set runtime.cpu_peak_gflops=1 \
    --out "$tmp/run2" >"$tmp/run2.txt" 2>&1 ||
    { cat "$tmp/run2.txt"; echo "FAIL: the unpacked trainer failed on 2 ranks"; exit 1; }
  grep -q '"step":2' "$tmp/run2/telemetry/rank_00001.jsonl" ||
    { echo "FAIL: rank 1 of the 2-rank run wrote no step 2"; exit 1; }
) || fails=$((fails + 1))

# ---- bad input is named
printf 'not an archive' >"$tmp/bad.tar.xz"
msg=$(cd "$co" && bash "$src/scripts/gpu-bundle.sh" unpack "$tmp/bad.tar.xz" --prefix "$tmp/q" 2>&1)
[[ $? -eq 2 && $msg == *"$tmp/bad.tar.xz"* && $msg == *"not a gpu-bundle archive"* ]] ||
  fail "a bad archive: exit/message '$msg'"
msg=$(bash scripts/gpu-bundle.sh pack --build "$tmp/nope" --out "$tmp/n.tar.xz" 2>&1)
[[ $? -eq 2 && $msg == *"$tmp/nope"* ]] || fail "a missing build: exit/message '$msg'"
msg=$(bash scripts/gpu-bundle.sh pack --build "$build" --level 12 2>&1)
[[ $? -eq 2 && $msg == *"--level '12'"* ]] || fail "level 12: exit/message '$msg'"

((fails == 0)) && echo "test_gpu_bundle: ok" && exit 0
echo "test_gpu_bundle: $fails failure(s)"
exit 1
