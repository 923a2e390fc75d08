#!/usr/bin/env bash
# Validation 1 of docs/planner.md: calibrate this machine, run the CPU layout
# study (scripts/layout-study.sh: the default model at seq 128, global batch
# 4, 1, 2 and 4 ranks, 25 layouts), then set the planner's predicted peak
# memory and step time of every run beside what the run measured
# (scaletrain-plan compare). The three steps run back to back so that the
# calibration and the runs see the same machine; other jobs on it skew both
# (the load average is printed before and after). About 7 minutes on 2 cores.
#
#   scripts/plan-validate-cpu.sh [BUILD_DIR] [STEPS]     (default: build, 8)
# Environment (relative paths are from the repository root): OUT (default a
# fresh folder under /tmp), CLUSTER (cluster file
# to write, default $OUT/cpu-local.yaml), MPIEXEC (default mpiexec).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/scripts/cpu-env.sh"
build=$(realpath "${1:-$src/build}")
# From the repository root, so the cluster file and the runs record
# repository-relative config paths.
cd "$src"
steps=${2:-8}
out=${OUT:-$(mktemp -d /tmp/plan-validate.XXXXXX)}
cluster=${CLUSTER:-$out/cpu-local.yaml}
plan=$build/analysis/scaletrain-plan
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export SCALETRAIN_MPIEXEC=${MPIEXEC:-mpiexec}
model=(--config configs/models/default.yaml --set model.seq_len=128)
# The layout study's space: global batch 4 at 1, 2, 4 ranks, every family.
space=(--global-batch 4 --micro-batch 1,2,4 --zero 0,1,2,3 --chunks 1,2 --sp 0,1)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(getconf _NPROCESSORS_ONLN) cores); $(date -u +%Y-%m-%dT%H:%MZ)"
"$plan" calibrate "${model[@]}" --devices 1,2,4 "${space[@]}" --out "$cluster"
# tp 4 needs n_kv_heads 4: add that model's kernel calls to the same file.
"$plan" calibrate "${model[@]}" --set model.n_kv_heads=4 --devices 4 --tp 4 "${space[@]}" \
  --add-to "$cluster" --out "$cluster"
# Every run measures its sgemm rate at start (PEAK_GFLOPS=0) for compare's
# prediction at the run's own speed.
OUT=$out/runs MPIEXEC=${MPIEXEC:-mpiexec} PEAK_GFLOPS=0 "$src/scripts/layout-study.sh" "$build" "$steps"
"$plan" compare --cluster "$cluster" "$out"/runs/*/ --out "$out/compare"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cluster file: $cluster; runs: $out/runs; comparison: $out/compare"
