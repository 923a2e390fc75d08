#!/usr/bin/env bash
# Checkpoint cost on this machine (not a test): the default model on 2 ranks
# with asynchronous and with synchronous checkpoints, beside the disk's
# sequential write bandwidth measured in the same run (dd with fsync into the
# same folder). Prints stall per save, background write time, bandwidth, and
# overhead as a share of step time, measured and projected to longer intervals.
# Usage: scripts/bench-checkpoint.sh [BUILD_DIR] [STEPS] [INTERVAL] [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
steps=${2:-40}
interval=${3:-10}
out=${4:-$(mktemp -d /tmp/scaletrain-ckpt-bench.XXXXXX)}
cd "$here"
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
dd_mb=512
dd_s=$( { /usr/bin/time -f %e dd if=/dev/zero of="$out/dd.bin" bs=1M count=$dd_mb conv=fsync status=none; } 2>&1 )
rm -f "$out/dd.bin"
for mode in async sync; do
  mpirun --oversubscribe --bind-to none -np 2 "$build/app/scaletrain" \
    --config configs/models/default.yaml --set data.source=synthetic --set train.steps="$steps" \
    --set train.micro_batch=2 --set checkpoint.interval="$interval" --set checkpoint.mode=$mode \
    --set checkpoint.keep_last_n=2 --set runtime.name=ckpt-$mode --out "$out/$mode" > "$out/$mode.log"
  "$build/analysis/scaletrain-analyze" run "$out/$mode" --no-plots > /dev/null
done
/usr/bin/python3 - "$out" "$dd_mb" "$dd_s" "$interval" <<'PY'
import json, statistics, sys
out, dd_mb, dd_s, interval = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
disk = dd_mb * 2**20 / dd_s
print(f"disk: dd 512 MiB with fsync into {out}: {disk/2**20:.0f} MiB/s\n")
print("| mode | saves | bytes/save (all ranks) | stall/save (s) | background write (s) | write MiB/s per rank | of dd | median step (s) | overhead (stall/step time) | projected at 100 / 1000 steps |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in ("async", "sync"):
    recs = {}
    for r in (0, 1):
        for l in open(f"{out}/{mode}/telemetry/rank_{r:05d}.jsonl"):
            j = json.loads(l)
            if j.get("event") == "ckpt_commit":
                recs.setdefault(j["step"], []).append(j)
            if j.get("type") == "step" and r == 0:
                recs.setdefault("steps", []).append(j["step_s"])
    saves = sorted(k for k in recs if k != "steps")
    stall = statistics.median(max(x["stall_s"] for x in recs[s]) for s in saves)
    write = statistics.median(max(x.get("write_s", 0) for x in recs[s]) for s in saves)
    byts = statistics.median(sum(x["bytes"] for x in recs[s]) for s in saves)
    bw = statistics.median(statistics.mean(x["bandwidth_Bps"] for x in recs[s]) for s in saves)
    steps = recs["steps"]
    med = statistics.median(steps)
    overhead = sum(max(x["stall_s"] for x in recs[s]) for s in saves) / sum(steps)
    proj = lambda k: stall / (k * med + stall)
    print(f"| {mode} | {len(saves)} | {byts/2**20:.0f} MiB | {stall:.3f} | {write:.2f} | {bw/2**20:.0f} | {bw/disk:.2f} | {med:.2f} | {100*overhead:.2f}% (every {interval}) | {100*proj(100):.2f}% / {100*proj(1000):.3f}% |")
print(f"\nscaletrain-analyze reports: {out}/async/analysis/report.md, {out}/sync/analysis/report.md")
PY
