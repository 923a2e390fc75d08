#!/usr/bin/env bash
# The `scale` test: N ranks (default 128) of the tiny model on this machine,
# oversubscribed, run 10 steps with checkpoints at steps 5 and 10, resume the
# last checkpoint at N/2 ranks for 2 more steps, and `scaletrain-analyze run`
# both runs. Asserts that every rank's telemetry is complete (header with the
# start-up fields, every step, both commits, the end event; on resume the
# ckpt_resume event and steps 11-12) and that the analysis covers every rank.
# Usage: scale_test.sh BUILD_DIR SOURCE_DIR [RANKS]
set -euo pipefail
build=$1 src=$2 n=${3:-128}
half=$(((n + 1) / 2))
work=$(mktemp -d "${TMPDIR:-/tmp}/scaletrain-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$src"
run() {  # ranks out extra-args...
  local np=$1 out=$2
  shift 2
  local t0=$SECONDS
  if ! mpirun --oversubscribe --bind-to none -np "$np" "$build/app/scaletrain" \
      --config configs/models/tiny.yaml --out "$out" "$@" > "$out.log" 2>&1; then
    echo "FAIL: $np-rank run exited non-zero; last lines:"; tail -20 "$out.log"; exit 1
  fi
  echo "$np ranks: $((SECONDS - t0)) s ($out)"
}
# No storage probe: 128 ranks of one disk would write 8 GiB to measure it
# (the probe has its own tests).
run "$n" "$work/run" --set train.steps=10 --set checkpoint.interval=5 --set checkpoint.probe_mb=0
run "$half" "$work/resumed" --set train.steps=12 --set checkpoint.interval=0 \
  --set checkpoint.resume="$work/run/checkpoints"
for d in run resumed; do
  "$build/analysis/scaletrain-analyze" run "$work/$d" --no-plots > "$work/$d-analyze.log" 2>&1 ||
    { echo "FAIL: scaletrain-analyze run $d"; cat "$work/$d-analyze.log"; exit 1; }
done
/usr/bin/python3 - "$work" "$n" "$half" <<'PY'
import glob, json, sys
work, n, half = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def check(run, ranks, steps, commits, resumed):
    files = sorted(glob.glob(f"{work}/{run}/telemetry/rank_*.jsonl"))
    assert len(files) == ranks, f"{run}: {len(files)} rank files, expected {ranks}"
    for r, f in enumerate(files):
        recs = [json.loads(l) for l in open(f)]
        head = recs[0]
        assert head["type"] == "header" and head["rank"] == r and head["world_size"] == ranks, f
        assert head["startup_s"] > 0 and head["startup_cpu_s"] > 0, f"{f}: start-up fields"
        got = [x["step"] for x in recs if x["type"] == "step"]
        assert got == steps, f"{f}: steps {got}, expected {steps}"
        ev = [x["event"] for x in recs if x["type"] == "event"]
        assert ev.count("ckpt_commit") == commits, f"{f}: {ev.count('ckpt_commit')} commits"
        assert ev.count("ckpt_resume") == (1 if resumed else 0), f"{f}: resume event"
        assert ev[-1] == "end", f"{f}: last event {ev[-1]}"
    s = json.load(open(f"{work}/{run}/analysis/summary.json"))
    assert s["gpus"] == ranks, f"{run}: the analysis counts {s['gpus']} ranks, expected {ranks}"
    assert not s["errors"], f"{run}: analysis errors {s['errors']}"
    print(f"{run}: {ranks} rank files complete, analysis written")
check("run", n, list(range(1, 11)), 2, False)
check("resumed", half, [11, 12], 0, True)
idx = json.load(open(f"{work}/run/checkpoints/step_00000010/index.json"))
assert idx["world_size"] == n, "index.json world_size"
print("PASS")
PY
