#!/usr/bin/env bash
# gpu-check.sh: the one-command check of the CUDA backend on a GPU machine
# (sized for one H200, under 8 minutes): configure with the `cuda` preset for
# this GPU's architecture only (default sm_90), build the CUDA targets, run
# the tests labelled gpu, run the probe and the cuBLASLt bf16 GEMM benchmark,
# and print a table. The 1B/7B training-step rows say "not available" until
# the model runs on CUDA; no number is printed that was not measured.
#
# Usage: scripts/gpu-check.sh            (from anywhere in the repo)
# Environment: SCALETRAIN_CUDA_ARCHS (default 90), JOBS (default nproc),
#              GEMM_SIZE (default 8192).
# Exit: 0 all gpu tests passed; 1 a build step or test failed; 77 no GPU
# visible (everything built, tests skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
archs=${SCALETRAIN_CUDA_ARCHS:-90}
jobs=${JOBS:-$(nproc)}
gemm=${GEMM_SIZE:-8192}
build=build-cuda  # the cuda preset's binaryDir
log=$(mktemp -d)/gpu-check
mkdir -p "$log"

step() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - t0)); }
die() { printf 'gpu-check: %s (logs in %s)\n' "$*" "$log" >&2; exit 1; }

step "configure: cmake --preset cuda, sm ${archs}"
cmake --preset cuda -DSCALETRAIN_CUDA_ARCHS="$archs" >"$log/configure.txt" 2>&1 ||
  { tail -30 "$log/configure.txt"; die "configure failed"; }
grep -E "CUDA backend" "$log/configure.txt"

step "build (-j$jobs)"
targets=(scaletrain-cuda-probe scaletrain-bench-gemm cuda_kernels_test cuda_libs_test nccl_comm_test
  cuda_host_test)
timeout 420 cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$log/build.txt" 2>&1 ||
  { tail -40 "$log/build.txt"; die "build failed"; }
echo "built: ${targets[*]}"

step "ctest -L gpu"
timeout 240 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 200 \
  >"$log/ctest.txt" 2>&1
ctest_rc=$?
grep -E "Test +#|tests passed|Skipped|Failed|SKIP:" "$log/ctest.txt" | sed 's/^/  /'
summary=$(grep -E "tests passed" "$log/ctest.txt" || echo "ctest did not finish (rc $ctest_rc)")
skipped=$(grep -c "(Skipped)" "$log/ctest.txt" || true)

step "probe"
"$build/kernels/cuda/scaletrain-cuda-probe" | tee "$log/probe.txt"
probe_rc=${PIPESTATUS[0]}
device=$(sed -n 's/^device 0: //p' "$log/probe.txt")

step "bf16 GEMM rate (cuBLASLt, ${gemm}^3)"
"$build/kernels/cuda/scaletrain-bench-gemm" "$gemm" "$gemm" "$gemm" 50 | tee "$log/gemm.txt"
tflops=$(sed -n 's/^bf16_gemm_tflops=//p' "$log/gemm.txt")

na="not available: model not yet on CUDA"
step "summary"
printf '\n| item | value |\n|---|---|\n'
printf '| device | %s |\n' "${device:-none visible}"
printf '| gpu tests | %s; %s skipped |\n' "$summary" "$skipped"
printf '| measured bf16 GEMM rate (cuBLASLt %s^3) | %s |\n' "$gemm" \
  "${tflops:+$tflops TFLOP/s}${tflops:-n/a}"
printf '\n| model | seq_len | act_ckpt | tokens/s | MFU | HFU | peak memory | bf16 GEMM rate |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for m in llama-1b llama-7b; do
  printf '| %s | 4096 | full | %s | %s | %s | %s | %s |\n' "$m" "$na" "$na" "$na" "$na" \
    "${tflops:+$tflops TFLOP/s}${tflops:-n/a}"
done
printf '\nelapsed: %ds; logs: %s\n' $((SECONDS - t0)) "$log"

if [[ $probe_rc -eq 77 ]]; then
  echo "no GPU visible: everything built, gpu tests skipped"
  exit 77
fi
[[ $ctest_rc -eq 0 && $probe_rc -eq 0 ]] || exit 1
exit 0
