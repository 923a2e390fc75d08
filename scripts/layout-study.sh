#!/usr/bin/env bash
# CPU layout study: the default model (configs/models/default.yaml, synthetic
# data, sequences cut to SEQ tokens so a step is cheap) at 1, 2 and 4 ranks
# for each parallel layout family, same global batch (GB sequences)
# everywhere. Prints a Markdown table of the median step time and exposed /
# total communication per step (back half of the steps, slowest rank), and
# the load average before and after (other jobs on the machine skew it).
# About 5 minutes on 2 cores with the defaults.
#
#   scripts/layout-study.sh [BUILD_DIR] [STEPS]      (default: build, 8)
# Environment: MPIEXEC (default mpiexec), THREADS per rank (default 1),
# GB global batch (default 4), SEQ tokens per sequence (default 128),
# OUT (default a fresh folder under /tmp; relative to the repository root), PEAK_GFLOPS (runtime.cpu_peak_gflops,
# default 1; 0 makes every run measure its sgemm rate at start, which
# scaletrain-plan compare uses for the run's speed).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/scripts/cpu-env.sh"  # OpenBLAS kernel pick for unrecognised CPUs
build=$(realpath "${1:-$src/build}")
# From the repository root, so the runs record repository-relative config paths.
cd "$src"
steps=${2:-8}
bin=$build/app/scaletrain
mpiexec=${MPIEXEC:-mpiexec}
threads=${THREADS:-1}
gb=${GB:-4}
seq=${SEQ:-128}
peak=${PEAK_GFLOPS:-1}
out=${OUT:-$(mktemp -d /tmp/layout-study.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

Z="--set parallel.zero_stage"
KV4="--set model.n_kv_heads=4"  # tp 4 needs n_kv_heads % 4 == 0 (default has 2)
# name ranks dp grad_accum extra-sets
layouts=(
  "single 1 1 1 "
  "dp2 2 2 1 "
  "dp4 4 4 1 "
  "dp2_zero1 2 2 1 $Z=1"
  "dp4_zero1 4 4 1 $Z=1"
  "dp2_zero2 2 2 1 $Z=2"
  "dp4_zero2 4 4 1 $Z=2"
  "dp2_zero3 2 2 1 $Z=3"
  "dp4_zero3 4 4 1 $Z=3"
  "tp2 2 1 1 --set parallel.tp=2"
  "tp4_kv4 4 1 1 --set parallel.tp=4 $KV4"
  "tp2_sp 2 1 1 --set parallel.tp=2 --set parallel.sp=true"
  "tp4_sp_kv4 4 1 1 --set parallel.tp=4 --set parallel.sp=true $KV4"
  "pp2_1f1b 2 1 4 --set parallel.pp=2"
  "pp4_1f1b 4 1 4 --set parallel.pp=4"
  "pp2_interleaved2 2 1 4 --set parallel.pp=2 --set parallel.num_model_chunks=2"
  "pp4_interleaved2 4 1 4 --set parallel.pp=4 --set parallel.num_model_chunks=2"
  "cp2 2 1 1 --set parallel.cp=2"
  "cp4 4 1 1 --set parallel.cp=4"
  "dp2xtp2 4 2 1 --set parallel.tp=2"
  "dp2xtp2_zero3 4 2 1 --set parallel.tp=2 $Z=3"
  "dp2xpp2 4 2 2 --set parallel.pp=2"
  "dp2xcp2 4 2 1 --set parallel.cp=2"
  "pp2xtp2 4 1 4 --set parallel.pp=2 --set parallel.tp=2"
  "cp2xtp2 4 1 1 --set parallel.cp=2 --set parallel.tp=2"
)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(getconf _NPROCESSORS_ONLN) cores); $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| layout | ranks | step ms | exposed comm ms | total comm ms | comm MB/step/rank | note |"
echo "|---|---|---|---|---|---|---|"
for l in "${layouts[@]}"; do
  read -r name ranks dp accum sets <<<"$l"
  mb=$((gb / accum / dp))
  args="--config configs/models/default.yaml --set model.seq_len=$seq
        --set train.steps=$steps --set train.micro_batch=$mb --set train.grad_accum=$accum
        --set runtime.threads=$threads --set runtime.cpu_peak_gflops=$peak --set checkpoint.interval=0
        --set data.source=synthetic $sets --out $out/$name"
  if [ "$ranks" = 1 ]; then cmd="$bin $args"; else cmd="$mpiexec --oversubscribe --bind-to none -n $ranks $bin $args"; fi
  if ! $cmd >"$out/$name.log" 2>&1; then
    why=$(grep -o "error: .*" "$out/$name.log" | head -1 | cut -c8-90)
    echo "| $name | $ranks | - | - | - | - | not run: ${why:-see $out/$name.log} |"
    continue
  fi
  python3 - "$out/$name" "$name" "$ranks" <<'PY'
import json, glob, statistics, sys
run, name, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
per = []
for f in sorted(glob.glob(run + "/telemetry/rank_*.jsonl")):
    recs = []
    for x in open(f):
        try:
            j = json.loads(x)
        except ValueError:
            continue  # a cut last line
        if j.get("type") == "step":
            recs.append(j)
    recs = recs[len(recs) // 2:]
    per.append(recs)
def med(key, fn=lambda r, k: r[k]):
    return max(statistics.median(fn(r, key) for r in recs) for recs in per)
step = med("step_s"); exp = med("comm_exposed_s"); tot = med("comm_s")
mb = med("comm", lambda r, k: sum(v["bytes"] for v in r[k].values()) / 1e6)
print(f"| {name} | {ranks} | {step*1e3:.1f} | {exp*1e3:.1f} | {tot*1e3:.1f} | {mb:.1f} | |")
PY
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "runs: $out (command: scripts/layout-study.sh BUILD $steps; THREADS=$threads GB=$gb SEQ=$seq)"
