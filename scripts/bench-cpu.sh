#!/usr/bin/env bash
# CPU benchmark of a training step (not a test): scaletrain against PyTorch
# eager (python3-torch: the same model, batch and AdamW, ctest/model's
# independent implementation), in fp32 and in bf16 (scaletrain
# train.precision=bf16 against PyTorch under torch.autocast("cpu",
# bfloat16): both multiply bf16 matrices through oneDNN where the CPU has
# bf16 instructions), on two shapes:
#   default  configs/models/default.yaml (8 layers, d 512, vocab 256), micro-batch 2
#   d384     6 layers, d 384, 6 heads, ffn 1024, vocab 8192, seq 256, micro-batch 8
# For each shape and precision:
#   1 core : scaletrain 1 rank x 1 thread      vs PyTorch 1 thread
#   2 cores: scaletrain 2 ranks x 1 thread     vs PyTorch's best of 2 threads
#            and scaletrain 1 rank x 2 threads    or 2 processes of 1 thread
# with the per-rank work fixed (each rank or process runs the whole
# micro-batch). This machine's speed changes several-fold within minutes, so
# the runs go in interleaved rounds (every configuration of both precisions
# once per round, scaletrain and PyTorch alternating) and the report gives
# the median over rounds of each round's ratio (bench_cpu_report.py): tokens/s
# against PyTorch, bf16 against fp32, model FLOP/s as a share of the GEMM
# rate measured at start in the run's precision, and the step's breakdown
# from scaletrain's telemetry (kernel_s).
# Usage: scripts/bench-cpu.sh [BUILD_DIR] [STEPS] [ROUNDS]
#   SHAPES="default d384" and PRECISIONS="fp32 bf16" (the defaults) select.
#
# ZeRO mode, BENCH=zero (issue 22): scaletrain against itself, 2 ranks x 1
# thread, fp32, the first of SHAPES (default: "default"): ZeRO 0 and ZeRO 3
# runs alternate, and with BEFORE=/path/to/scaletrain (an older build) that
# binary's ZeRO 0 run joins each round (rounds alternate their order). The
# report (bench_zero_report.py) gives the median over rounds of each round's
# ratio of steady-state step time (rank 0's median step after the first two):
# ZeRO 3 / ZeRO 0 and ZeRO 0 / before, with the load before each run.
# ONE_RANK=1 adds a 1-rank ZeRO 0 and ZeRO 3 run to each round: their ratio
# is ZeRO 3's own work (its gathers are local copies at dp 1), without
# communication or waiting for a peer.
#   BENCH=zero [BEFORE=old/app/scaletrain] [ONE_RANK=1] scripts/bench-cpu.sh [BUILD_DIR] [STEPS] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
steps=${2:-8}
rounds=${3:-3}
shapes=${SHAPES:-default d384}
precisions=${PRECISIONS:-fp32 bf16}
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
st_run() {  # shape precision name ranks threads
  local shape=$1 prec=$2 name=$3 ranks=$4 threads=$5 dir=$out/$1-$2-$3
  local args=(--set train.precision="$prec" --set runtime.threads="$threads" --out "$dir")
  # shellcheck disable=SC2046
  if [[ $ranks == 1 ]]; then
    "$build/app/scaletrain" $(shape_args "$shape") "${common[@]}" "${args[@]}" > "$dir.log"
  else
    mpirun --oversubscribe --bind-to none -np "$ranks" "$build/app/scaletrain" \
      $(shape_args "$shape") "${common[@]}" "${args[@]}" > "$dir.log"
  fi
}
torch_run() {  # shape precision name threads -> json
  local shape=$1 prec=$2 name=$3 threads=$4 flag=()
  [[ $prec == bf16 ]] && flag=(--bf16)
  read -r L D H KV F V T B < <(/usr/bin/python3 -c "
import glob, json; r=json.load(open(sorted(glob.glob('$out/$shape-*-st1-*/run.json'))[0])); m=r['model']
print(m['n_layers'], m['d_model'], m['n_heads'], m['n_kv_heads'], m['ffn_hidden'], m['vocab_size'], m['seq_len'], r['config']['train']['micro_batch'])")
  # OpenBLAS's own pool ignores torch.set_num_threads: pin it too.
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads /usr/bin/python3 "$here/scripts/bench_torch_step.py" \
    --layers "$L" --d "$D" --heads "$H" --kv "$KV" --ffn "$F" --vocab "$V" --seq "$T" --batch "$B" \
    --steps "$steps" --threads "$threads" "${flag[@]}" > "$out/$shape-$prec-$name.json"
}
if [[ ${BENCH:-} == zero ]]; then
  shape=${SHAPES:-default}
  shape=${shape%% *}
  [[ -z ${BEFORE:-} || -x $BEFORE ]] || { echo "BEFORE=$BEFORE: not an executable scaletrain" >&2; exit 2; }
  z_run() {  # binary name zero-stage [ranks]
    local dir=$out/$2
    echo "load $(cut -d' ' -f1 /proc/loadavg)" > "$dir.load"
    # shellcheck disable=SC2046
    mpirun --oversubscribe --bind-to none -np "${4:-2}" "$1" $(shape_args "$shape") "${common[@]}" \
      --set parallel.zero_stage="$3" --set train.precision=fp32 --set runtime.threads=1 --out "$dir" > "$dir.log"
  }
  for r in $(seq 1 "$rounds"); do
    echo "zero round $r/$rounds (load $(cut -d' ' -f1 /proc/loadavg))"
    runs=("$build/app/scaletrain z0-$r 0" "$build/app/scaletrain z3-$r 3")
    [[ -n ${BEFORE:-} ]] && runs+=("$BEFORE before-$r 0")
    [[ ${ONE_RANK:-0} == 1 ]] && runs+=("$build/app/scaletrain z0r1-$r 0 1" "$build/app/scaletrain z3r1-$r 3 1")
    if (( r % 2 == 0 )); then  # the other order every second round
      rev=(); for ((k = ${#runs[@]} - 1; k >= 0; --k)); do rev+=("${runs[k]}"); done; runs=("${rev[@]}")
    fi
    # shellcheck disable=SC2086
    for run in "${runs[@]}"; do z_run $run; done
  done
  /usr/bin/python3 "$here/scripts/bench_zero_report.py" "$out" "$rounds"
  echo "raw output: $out"
  exit 0
fi
for shape in $shapes; do
  for r in $(seq 1 "$rounds"); do
    for prec in $precisions; do
      echo "$shape round $r/$rounds $prec (load $(cut -d' ' -f1 /proc/loadavg))"
      st_run "$shape" "$prec" "st1-$r" 1 1
      torch_run "$shape" "$prec" "pt1-$r" 1
      st_run "$shape" "$prec" "st2r-$r" 2 1
      torch_run "$shape" "$prec" "pt2t-$r" 2
      st_run "$shape" "$prec" "st2t-$r" 1 2
      # Two PyTorch processes at once, one thread each.
      torch_run "$shape" "$prec" "pt2pa-$r" 1 & torch_run "$shape" "$prec" "pt2pb-$r" 1; wait
    done
  done
done
/usr/bin/python3 "$here/scripts/bench_cpu_report.py" "$out" "$rounds"
echo "raw output: $out"
