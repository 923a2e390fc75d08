#!/usr/bin/env bash
# Benchmark (not a test) of what the telemetry's trace records cost: the
# same run with runtime.trace=off and with the default (collectives), in
# alternating pairs so both see the same machine, and the median step time
# of each (steady-state window: after train.warmup_steps_excluded) with their
# ratio, measured in this run. Also prints the trace records' bytes per rank
# and step, from which the size of a larger run follows.
# Usage: scripts/bench-trace.sh [BUILD_DIR] [RANKS] [STEPS] [PAIRS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
ranks=${2:-2}
steps=${3:-30}
pairs=${4:-3}
cd "$here"
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d /tmp/scaletrain-bench-trace.XXXXXX)
echo "ranks $ranks, $steps steps, $pairs pairs; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# The tests' tiny model, widened (d 256): a step of tens of milliseconds on
# a quiet core, where a per-collective or per-span cost would show.
args=(--config configs/models/tiny.yaml --set model.d_model=256 --set model.ffn_hidden=512
      --set data.source=synthetic --set train.steps="$steps" --set checkpoint.interval=0
      --set train.warmup_steps_excluded=3 --set runtime.cpu_peak_gflops=1
      --set train.micro_batch=8 --set train.grad_accum=2)
for p in $(seq 1 "$pairs"); do
  for level in off collectives; do
    mpiexec --oversubscribe --bind-to none -n "$ranks" "$build/app/scaletrain" "${args[@]}" \
      --set runtime.trace=$level --out "$out/$level-$p" > "$out/$level-$p.log" 2>&1
  done
done
python3 - "$out" "$pairs" <<'PY'
import json, glob, statistics, sys, os
out, pairs = sys.argv[1], int(sys.argv[2])
def steps(run):
    # The slowest rank's step_s per step, after the warm-up steps.
    per = {}
    for f in glob.glob(run + "/telemetry/rank_*.jsonl"):
        for line in open(f):
            j = json.loads(line)
            if j.get("type") == "step" and j["step"] > 3:
                per[j["step"]] = max(per.get(j["step"], 0), j["step_s"])
    return list(per.values())
med = {}
for level in ("off", "collectives"):
    s = [x for p in range(1, pairs + 1) for x in steps(f"{out}/{level}-{p}")]
    med[level] = statistics.median(s)
    print(f"runtime.trace={level:12s} median step {med[level]*1e3:8.2f} ms over {len(s)} steps")
print(f"ratio collectives/off: {med['collectives']/med['off']:.4f}")
tb, n = 0, 0
for f in glob.glob(f"{out}/collectives-1/telemetry/rank_*.jsonl"):
    for line in open(f):
        if '"type":"trace"' in line:
            tb += len(line); n += 1
print(f"trace records: {tb/max(n,1):.0f} bytes per rank and step ({n} records)")
PY
echo "runs in $out"
