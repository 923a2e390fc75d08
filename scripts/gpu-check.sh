#!/usr/bin/env bash
# gpu-check.sh: the one-command check of the CUDA backend on a GPU machine
# (sized for one H200, under 8 minutes): configure with the `cuda` preset for
# this GPU's architecture only (default sm_90), build the CUDA targets, run
# the tests labelled gpu, run the probe and the cuBLASLt bf16 GEMM benchmark,
# run the one-GPU bf16 training step (scaletrain-bench-step, full activation
# checkpointing, a few steps) at the llama-1b and llama-7b shapes, run the
# trainer itself (runtime.device=cuda) on llama-1b with one asynchronous
# checkpoint, and print a table; no number is printed that was not measured.
#
# Usage: scripts/gpu-check.sh            (from anywhere in the repo)
# Environment: SCALETRAIN_CUDA_ARCHS (default 90), JOBS (default nproc),
#              GEMM_SIZE (default 8192), STEPS (timed steps per model,
#              default 4; one untimed warm-up step more).
# Exit: 0 all gpu tests passed; 1 a build step or test failed; 77 no GPU
# visible (everything built, tests skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
archs=${SCALETRAIN_CUDA_ARCHS:-90}
jobs=${JOBS:-$(nproc)}
gemm=${GEMM_SIZE:-8192}
steps=${STEPS:-4}
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
targets=(scaletrain scaletrain-cuda-probe scaletrain-bench-gemm scaletrain-bench-step
  cuda_kernels_test cuda_libs_test nccl_comm_test cuda_step_test cuda_train_test cuda_host_test)
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

# micro-batch per model (7B: fp32 master, bf16 copy, fp32 grads and AdamW
# moments are 18 bytes/param, ~113 GiB, so one 4096-token sequence per step).
declare -A mbs=([llama-1b]=2 [llama-7b]=1)
declare -A step_rc
for m in llama-1b llama-7b; do
  step "training step: $m, seq 4096, micro-batch ${mbs[$m]}, $steps steps, full act ckpt"
  timeout 150 "$build/kernels/cuda/scaletrain-bench-step" --preset "$m" --seq 4096 \
    --micro-batch "${mbs[$m]}" --steps "$steps" --warmup 1 >"$log/step-$m.txt" 2>&1
  step_rc[$m]=$?
  tail -14 "$log/step-$m.txt" | sed 's/^/  /'
done

# The trainer on the GPU: llama-1b, the same shape as the step benchmark, 8
# steps (2 left out of the steady state), an async HDF5 checkpoint at step 4.
step "trainer: llama-1b, runtime.device=cuda, seq 4096, micro-batch 2, 8 steps, checkpoint at 4"
run=$log/trainer-run
timeout 240 "$build/app/scaletrain" --config configs/default.yaml --set model.preset=llama-1b \
  --set model.seq_len=4096 --set runtime.device=cuda --set train.precision=bf16 \
  --set train.act_ckpt=full --set train.micro_batch=2 --set train.steps=8 \
  --set train.warmup_steps_excluded=2 --set checkpoint.interval=4 --set checkpoint.keep_last_n=1 \
  --out "$run" >"$log/trainer.txt" 2>&1
trainer_rc=$?
tail -6 "$log/trainer.txt" | sed 's/^/  /'
done_line=$(grep -E "done: .* steady state" "$log/trainer.txt" | tail -1)
tr_toks=$(sed -n 's/.*steady state \([0-9.e+]*\) tok\/s.*/\1/p' <<<"$done_line")
tr_mfu=$(sed -n 's/.*tok\/s, MFU \([0-9.e+]*\)%.*/\1/p' <<<"$done_line")
# The loop's stall at the checkpoint step (device-to-pinned-host copy plus the
# snapshot), from the step record; the write time from the commit event.
tr_stall=$(grep '"type":"step"' "$run/telemetry/rank_00000.jsonl" 2>/dev/null | grep '"step":4,' |
  grep -o '"ckpt_stall_s":[0-9.e+-]*' | head -1 | cut -d: -f2)
tr_write=$(grep -o '"event":"ckpt_commit"[^}]*' "$run/telemetry/rank_00000.jsonl" 2>/dev/null |
  grep -o '"write_s":[0-9.e+-]*' | head -1 | cut -d: -f2)
rm -rf "$run/checkpoints"  # ~15 GB

val() { sed -n "s/^$2=//p" "$log/step-$1.txt" | head -1; }
step "summary"
printf '\n| item | value |\n|---|---|\n'
printf '| device | %s |\n' "${device:-none visible}"
printf '| gpu tests | %s; %s skipped |\n' "$summary" "$skipped"
printf '| measured bf16 GEMM rate (cuBLASLt %s^3) | %s |\n' "$gemm" \
  "${tflops:+$tflops TFLOP/s}${tflops:-n/a}"
printf '\n| model | seq_len | micro-batch | act_ckpt | tokens/s | MFU | HFU | peak memory | bf16 GEMM rate |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for m in llama-1b llama-7b; do
  if [[ ${step_rc[$m]} -eq 0 ]]; then
    printf '| %s | 4096 | %s | full | %s | %s | %s | %s GiB | %s |\n' "$m" "${mbs[$m]}" \
      "$(val "$m" tokens_per_s)" "$(val "$m" mfu)" "$(val "$m" hfu)" "$(val "$m" peak_device_gib)" \
      "${tflops:+$tflops TFLOP/s}${tflops:-n/a}"
  elif [[ ${step_rc[$m]} -eq 77 ]]; then
    printf '| %s | 4096 | %s | full | skipped: no GPU | | | | |\n' "$m" "${mbs[$m]}"
  else
    printf '| %s | 4096 | %s | full | failed (rc %s, see %s) | | | | |\n' "$m" "${mbs[$m]}" \
      "${step_rc[$m]}" "$log/step-$m.txt"
  fi
done
printf '\n| trainer (runtime.device=cuda) | tokens/s | MFU | checkpoint stall | background write |\n'
printf '|---|---|---|---|---|\n'
if [[ $trainer_rc -eq 0 ]]; then
  printf '| llama-1b, seq 4096, micro-batch 2, full act ckpt | %s | %s%% | %s s | %s s |\n' \
    "${tr_toks:-n/a}" "${tr_mfu:-n/a}" "${tr_stall:-n/a}" "${tr_write:-n/a}"
else
  printf '| llama-1b | failed (rc %s, see %s) | | | |\n' "$trainer_rc" "$log/trainer.txt"
fi
printf '\nelapsed: %ds; logs: %s\n' $((SECONDS - t0)) "$log"

if [[ $probe_rc -eq 77 ]]; then
  echo "no GPU visible: everything built, gpu tests skipped"
  exit 77
fi
[[ $ctest_rc -eq 0 && $probe_rc -eq 0 && ${step_rc[llama-1b]} -eq 0 && ${step_rc[llama-7b]} -eq 0 &&
  $trainer_rc -eq 0 ]] ||
  exit 1
exit 0
