#!/usr/bin/env bash
# Checkpoint cost on this machine (not a test), against the checkpoint
# folder's own speed measured in the same runs (the trainer's storage probe,
# run.json `storage`; docs/checkpoint-format.md):
# 1. the default model on 2 ranks, asynchronous and synchronous saves: stall
#    per save, the node's write bandwidth and its share of the probed write
#    bandwidth, overhead as a share of step time; then a cold restore (the
#    last save's files dropped from the page cache) under another layout
#    (tp 2 instead of dp 2) and its share of the probed cold read;
# 2. scaletrain-bench-checkpoint on 2 ranks with the default model's bytes
#    per rank and with BIG_MIB (default 1024) per rank: each writer variant
#    (HDF5 alignment, block, write-back, the previous H5Dwrite writer) and
#    the cold restore through the resharding loader, against the probe.
# The 1-minute load is printed beside the figures (2 cores: above 2 the
# figures are not clean).
# Usage: scripts/bench-checkpoint.sh [BUILD_DIR] [STEPS] [INTERVAL] [OUT_DIR] [BIG_MIB]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
steps=${2:-40}
interval=${3:-10}
out=${4:-$(mktemp -d /tmp/scaletrain-ckpt-bench.XXXXXX)}
big=${5:-1024}
probe_mb=256
cd "$here"
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "load $(load) (1 min) at the start"
common=(--config configs/models/default.yaml --set data.source=synthetic --set train.micro_batch=2
  --set checkpoint.probe_mb=$probe_mb)
for mode in async sync; do
  mpirun --oversubscribe --bind-to none -np 2 "$build/app/scaletrain" "${common[@]}" \
    --set train.steps="$steps" --set checkpoint.interval="$interval" --set checkpoint.mode=$mode \
    --set checkpoint.keep_last_n=2 --set runtime.name=ckpt-$mode --out "$out/$mode" > "$out/$mode.log"
  "$build/analysis/scaletrain-analyze" run "$out/$mode" --no-plots > /dev/null
done
echo "load $(load) (1 min) after the save runs"
# The cold restore: the async run's last step, its files dropped from the
# page cache, loaded under tp 2 (saved under dp 2); one step after it, so
# that run.json records the start-up phases (`resume` is the restore).
last=$(cat "$out/async/checkpoints/latest")
/usr/bin/python3 - "$out/async/checkpoints/$last" <<'PY'
import os, sys
for n in os.listdir(sys.argv[1]):
    fd = os.open(os.path.join(sys.argv[1], n), os.O_RDONLY)
    os.fdatasync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
PY
mpirun --oversubscribe --bind-to none -np 2 "$build/app/scaletrain" "${common[@]}" \
  --set train.steps=$((steps + 1)) --set checkpoint.interval="$interval" --set parallel.dp=1 \
  --set parallel.tp=2 --set checkpoint.dir="$out/async/checkpoints" \
  --set runtime.name=ckpt-restore --out "$out/restore" > "$out/restore.log"
echo "load $(load) (1 min) after the restore"
/usr/bin/python3 - "$out" "$interval" "$last" <<'PY'
import json, statistics, sys
out, interval, last = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = lambda b: b / 2**20
print("\n| mode | saves | bytes/save (all ranks) | stall/save (s) | background write (s) | node write MiB/s | probed write MiB/s (2 writers) | write / probed | median step (s) | overhead (stall/step time) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in ("async", "sync"):
    run = json.load(open(f"{out}/{mode}/run.json"))
    disk = run["storage"]["write_all_Bps"]
    recs, steps = {}, []
    for r in (0, 1):
        for l in open(f"{out}/{mode}/telemetry/rank_{r:05d}.jsonl"):
            j = json.loads(l)
            if j.get("event") == "ckpt_commit":
                recs.setdefault(j["step"], []).append(j)
            if j.get("type") == "step" and r == 0:
                steps.append(j["step_s"])
    saves = sorted(recs)
    later = saves[1:] or saves  # the first pays one-time costs (reported apart in the analysis)
    stall = statistics.median(max(x["stall_s"] for x in recs[s]) for s in later)
    write = statistics.median(max(x["write_s"] for x in recs[s]) for s in later)
    byts = statistics.median(sum(x["bytes"] for x in recs[s]) for s in later)
    node = statistics.median(sum(x["bytes"] for x in recs[s]) / max(x["file_s"] for x in recs[s]) for s in later)
    med = statistics.median(steps)
    overhead = sum(max(x["stall_s"] for x in recs[s]) for s in saves) / sum(steps)
    print(f"| {mode} | {len(saves)} | {mib(byts):.0f} MiB | {stall:.3f} | {write:.2f} | {mib(node):.0f} | {mib(disk):.0f} | {node/disk:.2f} | {med:.2f} | {100*overhead:.2f}% (every {interval}) |")
run = json.load(open(f"{out}/restore/run.json"))
idx = json.load(open(f"{out}/async/checkpoints/{last}/index.json"))
res = next(p["wall_s"] for p in run["startup"]["phases"] if p["name"] == "resume")
rd = run["storage"]["read_all_Bps"]
print(f"\ncold restore of {last} ({mib(idx['bytes']):.0f} MiB, saved dp 2, loaded tp 2): {res:.2f} s = "
      f"{mib(idx['bytes']/res):.0f} MiB/s; probed cold read ({run['storage']['read_method']}, 2 readers) "
      f"{mib(rd):.0f} MiB/s; restore / probed = {idx['bytes']/res/rd:.2f}")
print(f"reports: {out}/async/analysis/report.md, {out}/sync/analysis/report.md")
PY
mib_default=$(/usr/bin/python3 -c "
import json; i=json.load(open('$out/async/checkpoints/$last/index.json')); print(round(i['bytes']/2/2**20))")
for mib in "$mib_default" "$big"; do
  echo; echo "scaletrain-bench-checkpoint, 2 ranks x $mib MiB:"
  variants=default,no-align,align-4k,meta-1m,block-1m,block-16m,no-writeback,direct,h5dwrite
  if ((mib > 512)); then variants=default,direct,h5dwrite; fi
  mpirun --oversubscribe --bind-to none -np 2 "$build/app/scaletrain-bench-checkpoint" \
    --dir "$out/bench-$mib" --mib-per-rank "$mib" --saves 3 --probe-mib $probe_mb --variants "$variants" |
    grep -v ' committed: '  # the Checkpointer: one line per save
  rm -rf "$out/bench-$mib"
done
