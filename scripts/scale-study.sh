#!/usr/bin/env bash
# Scale study of everything that grows with the number of ranks (not a test):
# the tiny model at 1, 8, 32, 64, 128 and 256 ranks on this machine
# (oversubscribed CPU ranks), each run 10 steps with a checkpoint every 5,
# then resumed from its last checkpoint into half the ranks for 2 more steps,
# then `scaletrain-analyze run` on it; at the end `scaletrain-analyze
# campaign` over all runs. Measured per size, from the ranks' own telemetry
# and the wall clock around each command:
#   start-up: launch to the first step (slowest rank), and the ranks' own
#     startup_s / startup_cpu_s (telemetry header: process start to header);
#   memory: the largest resident set and anonymous memory of a rank, and the
#     job's proportional set size (sampled every second);
#   median step; checkpoint commit: the loop's stall and the background
#     write (write, vote and commit), median over ranks and saves;
#   resume into half the ranks: wall clock and load_s;
#   scaletrain-analyze run and campaign: wall clock.
# Writes OUT/scale.md, scale.csv, scale.json and SVG plots
# (scripts/scale_study_report.py), plus the runs and their analyses.
#
# Usage: scripts/scale-study.sh [--ranks LIST] [--steps N] [--out DIR] [--build DIR]
#   defaults: --ranks 1,8,32,64,128,256 --steps 10 --out results/scale-tiny-cpu --build build
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ranks_list=1,8,32,64,128,256 steps=10 out=results/scale-tiny-cpu build=build
while (($#)); do
  (($# >= 2)) || { echo "scale-study.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --ranks) ranks_list=$2 ;;
    --steps) steps=$2 ;;
    --out) out=$2 ;;
    --build) build=$2 ;;
    *) echo "scale-study.sh: unknown option '$1' (valid: --ranks --steps --out --build)" >&2; exit 2 ;;
  esac
  shift 2
done
[[ $steps =~ ^[1-9][0-9]*$ && $steps -ge 2 ]] || { echo "scale-study.sh: --steps must be >= 2" >&2; exit 2; }
cd "$here"
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trainer=$build/app/scaletrain analyze=$build/analysis/scaletrain-analyze
for b in "$trainer" "$analyze"; do
  [[ -x $b ]] || { echo "scale-study.sh: '$b' not built (cmake --build --preset cpu)" >&2; exit 2; }
done
[[ -e $out ]] && { echo "scale-study.sh: '$out' exists; move it away or give --out" >&2; exit 2; }
mkdir -p "$out/runs" "$out/resume" "$out/logs"
interval=$(((steps + 1) / 2))

now() { date +%s.%N; }
# Samples the memory of every scaletrain process once a second until the
# file $1.stop appears; writes to $1 "max_rss_kb max_anon_kb max_pss_total_kb":
# the largest resident set and anonymous memory of one rank, and the largest
# sum of proportional set sizes (shared library pages split among the ranks
# that map them: what the job really holds).
sample_mem() {
  local f=$1 rss=0 anon=0 pss=0 line
  while [[ ! -e $f.stop ]]; do
    line=$(for p in $(pgrep -x scaletrain || true); do cat "/proc/$p/smaps_rollup" 2>/dev/null || true; done |
      awk '/^Rss:/ {if ($2 > r) r = $2} /^Anonymous:/ {if ($2 > a) a = $2} /^Pss:/ {s += $2}
           END {print r + 0, a + 0, s + 0}')
    read -r r a s <<< "$line"
    ((r > rss)) && rss=$r
    ((a > anon)) && anon=$a
    ((s > pss)) && pss=$s
    sleep 1
  done
  echo "$rss $anon $pss" > "$f"
}
mpi() {  # ranks args...
  local n=$1
  shift
  mpirun --oversubscribe --bind-to none -np "$n" "$@"
}

{
  echo "# scale study: $(date -u +%FT%TZ), commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  echo "# host: $(hostname), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(mpirun --version 2>&1 | head -1)"
  echo "scripts/scale-study.sh --ranks $ranks_list --steps $steps --out $out --build $build"
} > "$out/invocation.txt"

IFS=', ' read -r -a sizes <<< "$ranks_list"
: > "$out/timings.tsv"
for n in "${sizes[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "scale-study.sh: rank count '$n' is not a positive number" >&2; exit 2; }
  name=$(printf 'r%04d' "$n")
  half=$(((n + 1) / 2))
  run=$out/runs/$name
  echo "scale-study: $n ranks ($name)"
  rm -f "$out/logs/$name.rss" "$out/logs/$name.rss.stop"
  sample_mem "$out/logs/$name.rss" &
  sampler=$!
  t0=$(now)
  rc=0
  mpi "$n" "$trainer" --config configs/models/tiny.yaml --set train.steps="$steps" \
    --set checkpoint.interval="$interval" --set runtime.name="$name" --out "$run" \
    > "$out/logs/$name.log" 2>&1 || rc=$?
  t1=$(now)
  touch "$out/logs/$name.rss.stop"
  wait "$sampler" || { echo "scale-study.sh: the memory sampler failed" >&2; exit 1; }
  if ((rc != 0)); then
    echo "scale-study.sh: the $n-rank run failed (exit $rc); see $out/logs/$name.log" >&2
    tail -5 "$out/logs/$name.log" >&2
    exit 1
  fi
  # Resume the last checkpoint into half the ranks for two more steps.
  rdir=$out/resume/$name-to-$(printf 'r%04d' "$half")
  t2=$(now)
  rc=0
  mpi "$half" "$trainer" --config configs/models/tiny.yaml --set train.steps=$((steps + 2)) \
    --set checkpoint.interval=0 --set checkpoint.resume="$run/checkpoints" \
    --set runtime.name="$name-resumed" --out "$rdir" > "$out/logs/$name-resume.log" 2>&1 || rc=$?
  t3=$(now)
  if ((rc != 0)); then
    echo "scale-study.sh: resuming the $n-rank run at $half ranks failed (exit $rc); see $out/logs/$name-resume.log" >&2
    exit 1
  fi
  t4=$(now)
  "$analyze" run "$run" > "$out/logs/$name-analyze.log" 2>&1 ||
    { echo "scale-study.sh: scaletrain-analyze run $run failed; see $out/logs/$name-analyze.log" >&2; exit 1; }
  t5=$(now)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$half" "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" \
    "$(cat "$out/logs/$name.rss")" >> "$out/timings.tsv"
done
t6=$(now)
"$analyze" campaign "$out"/runs/r* --out "$out/analysis" > "$out/logs/campaign.log" 2>&1 ||
  { echo "scale-study.sh: scaletrain-analyze campaign failed; see $out/logs/campaign.log" >&2; exit 1; }
t7=$(now)
echo "campaign $t6 $t7" > "$out/campaign_time.txt"
# Checkpoint shards are large next to everything else and not needed for the
# report: keep index.json (the commit record) only.
find "$out/runs" -name 'rank_*.h5' -delete
/usr/bin/python3 scripts/scale_study_report.py "$out"
