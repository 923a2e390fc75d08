#!/usr/bin/env bash
# Start-up and exit against the rank count (not a test): the tiny model for
# 2 steps with runtime.cpu_peak_gflops=50 (no peak measurement) and a
# checkpoint at step 1, at each rank count given, oversubscribed on this
# machine, with the trainer of BUILD and, optionally, a second trainer
# (BEFORE, e.g. one built from an earlier commit) in the same run. Per run:
#   first_s   launch (mpirun started) to the start of step 1 (the slowest
#             rank's t_start in telemetry)
#   exit_s    the end of the last step (slowest rank) to mpirun's exit
#   cpu_s     user + system CPU seconds of the whole job (mpirun and every
#             rank, from /usr/bin/time), and per rank
#   commit_s  the step-1 checkpoint's write and commit (ckpt_commit's
#             write_s, slowest rank)
#   load      /proc/loadavg's 1-minute figure before and after
#   idle      the share of the machine's CPU time that was idle in the 2 s
#             before the run (/proc/stat): the load average lags by a minute,
#             so after a large run it still shows that run while the machine
#             is already quiet; this shows what the next run started on
# Before the trainers, at each rank count, the same launch runs a bare MPI
# job (scaletrain-bench-bare-mpi: MPI_Init_thread, a barrier, MPI_Finalize,
# linked against MPI alone): its first_s is launch to the slowest rank's
# return from MPI_Init_thread, its exit_s the end of the barrier to mpirun's
# exit. Below each trainer's row, `beyond bare` is its first_s and exit_s
# less the bare job's: what the trainer adds to what any MPI job costs.
# With the BUILD trainer, run.json's `startup` phases (slowest rank's wall,
# mean CPU per rank) are printed below each run. CPU seconds are what a
# loaded machine does not inflate; wall times on a shared machine measure
# its load too: read them beside the load.
# Usage: scripts/bench-startup.sh BUILD_DIR [BEFORE_SCALETRAIN|-] RANKS...
#   e.g.  scripts/bench-startup.sh build /tmp/before/scaletrain 16 32 64 128
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
(($# >= 3)) || { echo "usage: $0 BUILD_DIR BEFORE_SCALETRAIN|- RANKS..." >&2; exit 2; }
build=$1 before=$2
shift 2
after=$build/app/scaletrain
bare=$build/app/scaletrain-bench-bare-mpi
for b in "$after" "$bare"; do
  [[ -x $b ]] || { echo "bench-startup: no $b (build first)" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/st-bench-startup-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$here"

idle_share() {  # idle CPU share over the next 2 s, in percent
  local a b
  a=($(head -1 /proc/stat)); sleep 2; b=($(head -1 /proc/stat))
  local tot=0 i
  for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  echo $(( tot > 0 ? 100 * (b[4] - a[4] + b[5] - a[5]) / tot : 0 ))
}

launch() {  # ranks command...: the measured launch, timed by /usr/bin/time
  local n=$1
  shift
  /usr/bin/time -f "%U %S" -o "$work/time" mpirun --oversubscribe --bind-to none -np "$n" "$@"
}

bare_first="" bare_exit=""
bare() {  # ranks: the bare MPI job; sets bare_first and bare_exit
  local n=$1 out=$work/bare-$1.json l0 l1 t0 t1 idle
  idle=$(idle_share)
  l0=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  bare_first="" bare_exit=""
  launch "$n" "$bare" "$out" >"$work/bare.log" 2>&1 || {
    echo "FAIL: bare MPI job, $n ranks (exit status $?):"; tail -20 "$work/bare.log" | sed 's/^/    /'
    failed=1
    return 0
  }
  t1=$(date +%s.%N)
  l1=$(cut -d' ' -f1 /proc/loadavg)
  # The first line sets the two figures; the row goes to the table.
  { read -r bare_first bare_exit && cat; } < <(python3 - "$out" "$t0" "$t1" "$work/time" "$n" \
    "$l0" "$l1" "$idle" <<'PY'
import json, sys
out, t0, t1, tf, n, l0, l1, idle = sys.argv[1:]
t0, t1, n = float(t0), float(t1), int(n)
b = json.load(open(out))
assert b["ranks"] == n, f"bare job ran {b['ranks']} ranks, not {n}"
u, s = (float(x) for x in open(tf).read().split()[-2:])
first, exit_ = b["init_s"] - t0, t1 - b["done_s"]
print(f"{first:.3f} {exit_:.3f}")
print(f"{'bare':7s} {n:5d} {first:9.2f} {exit_:8.2f} {u + s:8.1f} {(u + s) / n:8.3f} "
      f"{'-':>9s}   {l0}/{l1}  {idle}%")
print(f"        bare phases: launch to main (slowest rank) {b['main_s'] - t0:.2f} s, "
      f"MPI_Init_thread's end {first:.2f} s")
PY
  )
  rm -f "$out"
}

one() {  # label binary ranks
  local label=$1 bin=$2 n=$3 out=$work/run-$1-$3
  local l0 t0 t1 l1 idle
  idle=$(idle_share)
  l0=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  launch "$n" "$bin" --config configs/models/tiny.yaml --set train.steps=2 \
    --set runtime.cpu_peak_gflops=50 --set checkpoint.interval=1 --set checkpoint.keep_last_n=1 \
    --out "$out" >"$out.log" 2>&1 || {
    # A failed run still prints what its telemetry holds (a job that trained
    # and then failed at exit, e.g. in MPI_Finalize, has its first step).
    echo "FAIL: $label $n ranks (exit status $?):"; tail -20 "$out.log" | sed 's/^/    /'
    failed=1
  }
  t1=$(date +%s.%N)
  l1=$(cut -d' ' -f1 /proc/loadavg)
  python3 - "$out" "$t0" "$t1" "$work/time" "$label" "$n" "$l0" "$l1" "$idle" "$bare_first" \
    "$bare_exit" <<'PY'
import glob, json, sys
out, t0, t1, tf, label, n, l0, l1, idle, bare_first, bare_exit = sys.argv[1:]
t0, t1, n = float(t0), float(t1), int(n)
first, last, commit = 0.0, 0.0, 0.0
for f in glob.glob(out + "/telemetry/rank_*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        if r.get("type") == "step":
            if r["step"] == 1: first = max(first, r["t_start"])
            last = max(last, r["t_start"] + r["step_s"])
        if r.get("event") == "ckpt_commit" and r.get("step") == 1:
            commit = max(commit, r.get("write_s", 0.0))
u, s = (float(x) for x in open(tf).read().split()[-2:])
print(f"{label:7s} {n:5d} {first - t0:9.2f} {t1 - last:8.2f} {u + s:8.1f} {(u + s) / n:8.3f} "
      f"{commit:9.2f}   {l0}/{l1}  {idle}%")
if bare_first and first > 0:
    print(f"        beyond bare: first {first - t0 - float(bare_first):+.2f} s, "
          f"exit {t1 - last - float(bare_exit):+.2f} s")
for key in ("startup", "exit"):
    try:
        st = json.load(open(out + "/run.json"))[key]
        print(f"        {key} phases (slowest wall s / mean CPU s): " + ", ".join(
            f"{p['name']} {p['wall_s']:.2f}/{p['cpu_s_mean']:.3f}" for p in st["phases"]))
    except (KeyError, FileNotFoundError, ValueError):
        pass
PY
  rm -rf "$out"
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
printf '%-7s %5s %9s %8s %8s %8s %9s   %s  %s\n' binary ranks first_s exit_s cpu_s cpu/rank commit_s \
  load1 idle
failed=0
for n in "$@"; do
  bare "$n"
  [[ $before != - ]] && one before "$before" "$n"
  one after "$after" "$n"
done
exit $failed
