#!/usr/bin/env bash
# CPU benchmark of a training step (not a test): scaletrain against PyTorch
# eager (python3-torch: the same model, batch and AdamW, ctest/model's
# independent implementation) on two shapes, all measured in one run:
#   default  configs/models/default.yaml (8 layers, d 512, vocab 256), micro-batch 2
#   d384     6 layers, d 384, 6 heads, ffn 1024, vocab 8192, seq 256, micro-batch 8
# For each shape:
#   1 core : scaletrain 1 rank x 1 thread      vs PyTorch 1 thread
#   2 cores: scaletrain 2 ranks x 1 thread     vs PyTorch's best of 2 threads
#            and scaletrain 1 rank x 2 threads    or 2 processes of 1 thread
#   ZeRO   : scaletrain 2 ranks x 1 thread under ZeRO 3 (dp 2) against the
#            same under ZeRO 0 (the 2-rank row above): the step-time ratio
# with the per-rank work fixed (each rank or process runs the whole
# micro-batch), tokens/s as ratios, model FLOP/s (MPT formula) as a share of
# the sgemm rate scaletrain measures at start in the same run, and the step's
# breakdown from scaletrain's telemetry (kernel_s: gemm, attention,
# elementwise, optimizer, allocation; communication; the rest).
# Usage: scripts/bench-cpu.sh [BUILD_DIR] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
steps=${2:-8}
cd "$here"
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d /tmp/scaletrain-bench.XXXXXX)
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<library default>}; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

shape_args() {  # name -> scaletrain --set arguments
  case $1 in
    default) echo "--config configs/models/default.yaml --set train.micro_batch=2" ;;
    d384) echo "--config configs/models/default.yaml --set model.n_layers=6 --set model.d_model=384
      --set model.n_heads=6 --set model.n_kv_heads=6 --set model.ffn_hidden=1024
      --set model.vocab_size=8192 --set model.seq_len=256 --set train.micro_batch=8" ;;
  esac
}
common=(--set data.source=synthetic --set train.steps="$steps" --set checkpoint.interval=0
        --set train.warmup_steps_excluded=2)
st_run() {  # shape name ranks threads [extra --set arguments]
  local shape=$1 name=$2 ranks=$3 threads=$4
  shift 4
  # shellcheck disable=SC2046
  if [[ $ranks == 1 ]]; then
    "$build/app/scaletrain" $(shape_args "$shape") "${common[@]}" --set runtime.threads="$threads" \
      --out "$out/$shape-$name" > "$out/$shape-$name.log"
  else
    mpirun --oversubscribe --bind-to none -np "$ranks" "$build/app/scaletrain" $(shape_args "$shape") \
      "${common[@]}" --set runtime.threads="$threads" "$@" --out "$out/$shape-$name" > "$out/$shape-$name.log"
  fi
}
torch_run() {  # shape name threads -> json
  local shape=$1 name=$2 threads=$3
  read -r L D H KV F V T B < <(/usr/bin/python3 -c "
import json; r=json.load(open('$out/$shape-st1/run.json')); m=r['model']
print(m['n_layers'], m['d_model'], m['n_heads'], m['n_kv_heads'], m['ffn_hidden'], m['vocab_size'], m['seq_len'], r['config']['train']['micro_batch'])")
  # OpenBLAS's own pool ignores torch.set_num_threads: pin it too.
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads /usr/bin/python3 "$here/scripts/bench_torch_step.py" \
    --layers "$L" --d "$D" --heads "$H" --kv "$KV" --ffn "$F" --vocab "$V" --seq "$T" --batch "$B" \
    --steps "$steps" --threads "$threads" > "$out/$shape-$name.json"
}
for shape in default d384; do
  st_run "$shape" st1 1 1
  st_run "$shape" st2r 2 1
  st_run "$shape" st2t 1 2
  st_run "$shape" st2z3 2 1 --set parallel.zero_stage=3
  torch_run "$shape" pt1 1
  torch_run "$shape" pt2t 2
  # Two PyTorch processes at once, one thread each.
  torch_run "$shape" pt2p_a 1 & torch_run "$shape" pt2p_b 1; wait
done
/usr/bin/python3 "$here/scripts/bench_cpu_report.py" "$out"
echo "raw output: $out"
