#!/usr/bin/env bash
# How steady is this machine's speed from one run to the next? (Not a test.)
# Runs the same single-rank training job N times back to back (default model,
# seq 128, micro-batch 2, 16 steps, one thread, no checkpoints), each measured
# by scaletrain-analyze run (median step over the back-half window, and the
# CPU seconds the rank spent a step: telemetry cpu_s), and prints how far apart
# the runs are: the spread (slowest / fastest - 1), the coefficient of
# variation, and how many pairs of runs are more than 10% apart (neighbours,
# and runs half the series apart, about the distance between a study's
# repeats). One rank alone does no communication, so a run that takes longer
# spent more CPU time on the same instructions: the host ran them slower.
# Two repeats of a study point are expected to differ that much too; read a
# study's repeat check (scaletrain-analyze campaign, Repeats) beside it.
#
# Before each run: the 1-minute load and the machine's idle share over 2 s
# (/proc/stat; the load average lags by a minute). A run that started with
# less than 80% of the machine idle is marked BUSY and left out of the
# figures.
#
# Usage: scripts/host-steadiness.sh [--build DIR] [--runs N] [--gap S]
#          [--out DIR] [--set KEY=VALUE ...]
#   --build DIR   the build folder (default: build)
#   --runs N      runs, 4 or more (default: 12)
#   --gap S       seconds between runs (default: 10)
#   --out DIR     where the runs and steadiness.tsv go (default: a temporary
#                 folder, removed at exit)
#   --set K=V     passed to every run (e.g. --set model.seq_len=256)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=build runs=12 gap=10 out="" sets=() tmp_out=0
usage() { sed -n '/^# Usage:/,/^#   --set/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
int_arg() {  # int_arg FLAG VALUE MIN
  [[ $2 =~ ^[0-9]+$ ]] && (($2 >= $3)) ||
    { echo "host-steadiness: $1 '$2' is not a whole number of at least $3" >&2; exit 2; }
}
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --runs) int_arg --runs "${2:-}" 4; runs=$2; shift 2 ;;
    --gap) int_arg --gap "${2:-}" 0; gap=$2; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --set) [[ ${2:-} == *=* ]] || { echo "host-steadiness: --set '${2:-}' is not KEY=VALUE" >&2; exit 2; }
           sets+=(--set "$2"); shift 2 ;;
    -h | --help) usage ;;
    *) echo "host-steadiness: unknown argument '$1'" >&2; usage ;;
  esac
done
trainer=$build/app/scaletrain analyze=$build/analysis/scaletrain-analyze
for b in "$trainer" "$analyze"; do
  [[ -x $b ]] || { echo "host-steadiness: no $b (build first: cmake --preset cpu && cmake --build --preset cpu)" >&2; exit 2; }
done
if [[ -z $out ]]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/st-steadiness-XXXXXX") tmp_out=1
  trap 'rm -rf "$out"' EXIT
else
  mkdir -p "$out"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

idle_share() {  # percent of the machine's CPU time idle over the next 2 s
  local a b i tot=0
  read -ra a < <(head -1 /proc/stat); sleep 2; read -ra b < <(head -1 /proc/stat)
  for ((i = 1; i < ${#a[@]}; i++)); do tot=$((tot + b[i] - a[i])); done
  ((tot > 0)) || { echo 100; return; }
  echo $((100 * (b[4] - a[4] + b[5] - a[5]) / tot))
}

tsv=$out/steadiness.tsv
printf 'run\tstart_utc\tload1\tidle_pct\tstep_ms\tcpu_ms_step\tverdict\n' > "$tsv"
echo "host-steadiness: $runs runs of one rank, $gap s apart, commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown), $(getconf _NPROCESSORS_ONLN) cores"
for ((i = 1; i <= runs; i++)); do
  idle=$(idle_share) load=$(cut -d' ' -f1 /proc/loadavg) t0=$(date -u +%H:%M:%S)
  dir=$out/run-$(printf '%02d' "$i")
  rm -rf "$dir"
  if ! mpirun -np 1 "$trainer" --config configs/models/default.yaml --set model.seq_len=128 \
      --set train.steps=16 --set train.micro_batch=2 --set checkpoint.interval=0 \
      --set runtime.threads=1 --set "runtime.name=steadiness-$i" "${sets[@]}" --out "$dir" \
      > "$dir.log" 2>&1; then
    echo "host-steadiness: run $i failed; its log: $dir.log" >&2
    grep -m3 'error' "$dir.log" >&2 || tail -5 "$dir.log" >&2
    exit 1
  fi
  "$analyze" run "$dir" > "$dir.analyze.log" 2>&1 ||
    { echo "host-steadiness: scaletrain-analyze run $dir failed: $dir.analyze.log" >&2; exit 1; }
  read -r step cpu < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["step_time_s"]["p50"]*1e3, (d.get("cpu_s_step") or 0)*1e3)' "$dir/analysis/summary.json")
  verdict=ok
  ((idle >= 80)) || verdict=BUSY
  printf '%d\t%s\t%s\t%s\t%.1f\t%.1f\t%s\n' "$i" "$t0" "$load" "$idle" "$step" "$cpu" "$verdict" >> "$tsv"
  printf '  run %2d  %s  load %5s  idle %3s%%  step %7.1f ms  CPU %7.1f ms/step  %s\n' \
    "$i" "$t0" "$load" "$idle" "$step" "$cpu" "$verdict"
  ((i == runs)) || sleep "$gap"
done

python3 - "$tsv" <<'EOF'
import csv, statistics as st, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")]
ok = [float(r["step_ms"]) for r in rows if r["verdict"] == "ok"]
busy = len(rows) - len(ok)
if len(ok) < 4:
    sys.exit(f"host-steadiness: only {len(ok)} of {len(rows)} runs started on an idle machine "
             "(80% idle or more); nothing to say about its steadiness")
apart = lambda a, b: max(a, b) / min(a, b) - 1
half = len(ok) // 2
near = [apart(ok[i], ok[i + 1]) for i in range(len(ok) - 1)]
far = [apart(ok[i], ok[i + half]) for i in range(len(ok) - half)]
print(f"steps of {len(ok)} runs (left out, BUSY: {busy}): median {st.median(ok):.1f} ms, "
      f"{min(ok):.1f}-{max(ok):.1f} ms, spread {100 * apart(min(ok), max(ok)):.1f}%, "
      f"coefficient of variation {100 * st.pstdev(ok) / st.mean(ok):.1f}%")
print(f"pairs more than 10% apart: {sum(d > 0.10 for d in near)} of {len(near)} neighbours "
      f"(largest {100 * max(near):.1f}%), {sum(d > 0.10 for d in far)} of {len(far)} runs {half} apart "
      f"(largest {100 * max(far):.1f}%)")
EOF
((tmp_out)) || echo "per run: $tsv"
