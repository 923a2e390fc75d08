#!/usr/bin/env bash
# multinode-study.sh: weak scaling across emulated nodes, measured and
# predicted, with repeats and the machine's load beside every run. Starts
# scripts/emucluster.sh (4 nodes, each capped to the same CPU quota, every
# link shaped), calibrates scaletrain-plan inside node1 (its MPI probe once
# with one rank per node, so the collectives are timed over the shaped links,
# and once with the ranks inside node1, for the collectives inside a node and
# the slowdown of ranks sharing its quota), submits the series through Slurm
# as one campaign (slurm/campaigns/common.sh; jobs held, released one at a
# time once the machine's 1-minute load is at most --max-load), then sets the
# planner's predictions beside the measurements (scaletrain-plan compare).
# Series (--series, comma separated):
#   dp          1 rank per node, dp = nodes (train.micro_batch --micro-batch)
#   ppdp        --pp ranks per node, pp x dp with dp = nodes, ranks placed in
#               blocks (mpirun's default): one node: pp inside it; more: each
#               node holds dp peers of one stage (dp inside, pp across)
#   ppdp-bynode the same jobs at 2+ nodes with the ranks placed round robin
#               over the nodes (mpirun --rank-by node): each node holds one
#               whole pipeline (pp inside, dp across)
# Every job is run --repeats times (run names end -a, -b, ...): by default
# each series whole, then again (--order series: a point's repeats minutes
# apart, so the host's drift over the study shows between them); with
# --order paired a point's repeats run one after the other (less of the
# host's drift falls between them, more between points).
# Tears the cluster down on every exit. Root only.
#
# Usage: scripts/multinode-study.sh [--build DIR] [--name NAME] [--results DIR]
#          [--bandwidth 1gbit] [--node-cpu 0.45] [--nodes-list 1,2,4]
#          [--series dp,ppdp,ppdp-bynode] [--repeats 2] [--model default] [--seq 128]
#          [--micro-batch 2] [--steps 12] [--pp 2] [--pp-micro-batch 1] [--pp-grad-accum 4]
#          [--order series|paired]  when a point's repeats run (default series)
#          [--cluster FILE]   reuse a calibration of this cluster instead of calibrating
#          [--max-load L]     the 1-minute load a run may start at (default: the cores)
#          [--load-wait S]    how long to wait for it before running anyway (default 150)
#          [--weight W]       the nodes' CPU weight (emucluster.sh --weight; development
#                             beside other work only: a committed study runs on a quiet machine)
# Writes RESULTS/NAME/ (default results/multinode-cpu-<UTC date>): the
# campaign (README.md, runs/, analysis/), cluster.yaml (the calibration),
# load.tsv (per run: 1-minute load before and after, verdict), compare/
# (predicted against measured) and study.txt (settings, command). Exit 0:
# every run had the cores it needed; 4: some did not (marked BUSY in load.tsv
# and the README: do not publish those figures); 1/2: the study failed.
# Re-predict committed runs (after a planner change) with one command:
#   build/analysis/scaletrain-plan compare --cluster RESULTS/NAME/cluster.yaml \
#       RESULTS/NAME/runs/*/ RESULTS/NAME/bynode/runs/*/ --out RESULTS/NAME/compare
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
invocation="scripts/multinode-study.sh $*"

build=build name="multinode-cpu-$(date -u +%Y%m%d)" out_root=results bw=1gbit node_cpu=0.45
nodes_list=1,2,4 series=dp,ppdp,ppdp-bynode repeats=2 model=default seq=128 mb=2 steps=12
pp=2 pp_mb=1 pp_ga=4 cluster="" max_load=$(getconf _NPROCESSORS_ONLN) load_wait=150 weight="" order=series
while (($#)); do
  (($# >= 2)) || { echo "multinode-study: $1 needs a value" >&2; exit 2; }
  case $1 in
    --build) build=$2 ;;
    --name) name=$2 ;;
    --results) out_root=$2 ;;
    --bandwidth) bw=$2 ;;
    --node-cpu) node_cpu=$2 ;;
    --nodes-list) nodes_list=$2 ;;
    --series) series=$2 ;;
    --repeats) repeats=$2 ;;
    --model) model=$2 ;;
    --seq) seq=$2 ;;
    --micro-batch) mb=$2 ;;
    --steps) steps=$2 ;;
    --pp) pp=$2 ;;
    --pp-micro-batch) pp_mb=$2 ;;
    --pp-grad-accum) pp_ga=$2 ;;
    --cluster) cluster=$2 ;;
    --max-load) max_load=$2 ;;
    --load-wait) load_wait=$2 ;;
    --weight) weight=$2 ;;
    --order) order=$2 ;;
    *) echo "multinode-study: unknown option '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
for v in repeats steps pp pp_mb pp_ga load_wait; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "multinode-study: --${v//_/-} '${!v}': expected a positive number" >&2; exit 2; }
done
((repeats <= 26)) || { echo "multinode-study: --repeats $repeats: at most 26" >&2; exit 2; }
[[ $order == series || $order == paired ]] ||
  { echo "multinode-study: --order '$order': expected series or paired" >&2; exit 2; }
[[ $max_load =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "multinode-study: --max-load '$max_load': expected a number" >&2; exit 2; }
read -r -a counts <<<"${nodes_list//,/ }"
read -r -a kinds <<<"${series//,/ }"
max_nodes=0
for c in "${counts[@]}"; do
  [[ $c =~ ^[1-9][0-9]*$ && $c -le 4 ]] || { echo "multinode-study: node count '$c': expected 1..4" >&2; exit 2; }
  ((c > max_nodes)) && max_nodes=$c
done
for k in "${kinds[@]}"; do
  case $k in dp | ppdp | ppdp-bynode) ;; *) echo "multinode-study: series '$k': expected dp, ppdp or ppdp-bynode" >&2; exit 2 ;; esac
done
plan=$build/analysis/scaletrain-plan
for b in "$build/app/scaletrain" "$build/analysis/scaletrain-analyze" "$plan" "$build/analysis/scaletrain-plan-probe"; do
  [[ -x $b ]] || { echo "multinode-study: '$b' not built (cmake --build $build)" >&2; exit 2; }
done
study=$out_root/$name
[[ -e $study ]] && { echo "multinode-study: '$study' exists; pick another --name" >&2; exit 2; }
why=$(bash scripts/emucluster.sh check) || { echo "multinode-study: $why" >&2; exit 77; }

load1() { cut -d' ' -f1 /proc/loadavg; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

cdir=$(mktemp -d /tmp/scaletrain-emu-study.XXXXXX)
cleanup() { bash scripts/emucluster.sh stop "$cdir" || true; rm -rf "$cdir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
node_args=()
for i in 1 2 3 4; do node_args+=(--node-cpu "node$i=$node_cpu"); done
bash scripts/emucluster.sh start "$cdir" --nodes 4 --cpus "$pp" --bandwidth "$bw" "${node_args[@]}" \
  ${weight:+--weight "$weight"} --owner $$
# shellcheck disable=SC1091
source "$cdir/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export SCALETRAIN_BIN=$build/app/scaletrain SCALETRAIN_ANALYZE=$build/analysis/scaletrain-analyze
export SCALETRAIN_PLAN=$plan
# mpirun inside each allocation (it starts its daemons with srun): srun --mpi=pmix
# direct launch crashed a node's ranks in MPI_Init now and then here.
export SCALETRAIN_LAUNCHER=mpirun
# The planner's MPI probe (it passes -n R and its own flags): one rank per
# node, every rank inside node1, and two ranks per node (the groups a
# layout with two ranks a node makes, in blocks and round robin).
printf '#!/bin/sh\nexec mpirun --hostfile %q --map-by ppr:1:node "$@"\n' "$cdir/hostfile" >"$cdir/bin/mpiexec-nodes"
printf '#!/bin/sh\nexec mpirun --host node1:%d "$@"\n' "$pp" >"$cdir/bin/mpiexec-node1"
printf '#!/bin/sh\nexec mpirun --hostfile %q --map-by ppr:2:node "$@"\n' "$cdir/hostfile" >"$cdir/bin/mpiexec-pairs"
chmod +x "$cdir/bin/mpiexec-nodes" "$cdir/bin/mpiexec-node1" "$cdir/bin/mpiexec-pairs"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# calibrate OUT: the planner's calibration inside node1 of this emulated cluster,
# released like a run once the 1-minute load is at most --max-load: every
# prediction rests on it, so a calibration measured under load makes the
# whole study BUSY. Its load before and after goes to cal_lines (study.txt
# and the README's load section).
cal_lines=() cal_busy=0
calibrate_emu() {
  local devs=1,2 w before after t0 verdict=ok
  ((max_nodes >= 4)) && devs=1,2,4
  for ((w = 0; w < load_wait; w += 2)); do above "$(load1)" "$max_load" || break; sleep 2; done
  before=$(load1) t0=$(date -u +%H:%M:%S)
  echo "   calibration $(basename "$1"): load before $before"
  bash scripts/emucluster.sh exec "$cdir" node1 \
    "SCALETRAIN_MPIEXEC='$cdir/bin/mpiexec-nodes' SCALETRAIN_MPIEXEC_NODE='$cdir/bin/mpiexec-node1' \
     SCALETRAIN_MPIEXEC_PAIRS='$cdir/bin/mpiexec-pairs' \
     '$plan' calibrate --config configs/models/$model.yaml --set model.seq_len=$seq --devices $devs \
     --micro-batch $mb --zero 0 --coll-seconds 0.5 --name emucluster-cpu --out '$1'"
  # The calibration ran on an emulated node: say so, and how its probes were placed.
  sed -i "s|^notes: .*|notes: \"measured by scaletrain-plan calibrate inside node1 of scripts/emucluster.sh (4 emulated nodes on a $(getconf _NPROCESSORS_ONLN)-core VM, $node_cpu CPU quota and $bw tbf links per node); collectives with inter_node true: over the links, per_node of the group's ranks on each node and node_ranks ranks on a node at once (1 1: one rank per node; 2 2: two on each; 1 2: two groups side by side); false: ranks inside node1 (shared memory); concurrency: ranks inside node1 sharing its quota\"|" "$1"
  # Node size for plan_check: the study's largest (compare predicts each run at its own).
  sed -i "s|^devices_per_node: .*|devices_per_node: $pp|" "$1"
  after=$(load1)
  # The probes run one to max_nodes ranks at a time under the nodes' quotas.
  if above "$before" "$max_load" || above "$after" "$(awk -v m="$max_load" -v n="$max_nodes" -v c="$node_cpu" 'BEGIN { print m + n * c }')"; then
    verdict=BUSY cal_busy=1
  fi
  cal_lines+=("$(basename "$1")"$'\t'"$t0"$'\t'"$before"$'\t'"$(date -u +%H:%M:%S)"$'\t'"$after"$'\t'"$verdict")
  echo "   calibration $(basename "$1"): load after $after: $verdict"
}
calibrated_here=0
if [[ -z $cluster ]]; then
  echo "== calibrate inside node1 (probe across nodes, then inside node1)"
  cluster=$cdir/cluster.yaml calibrated_here=1
  calibrate_emu "$cluster"
fi
[[ -f $cluster ]] || { echo "multinode-study: cluster file '$cluster' not found" >&2; exit 2; }

echo "== campaign $name: series ${kinds[*]}, nodes ${counts[*]}, $repeats repeat(s) ($order), jobs released one at a time"
# shellcheck source=slurm/campaigns/common.sh
source slurm/campaigns/common.sh
results=$out_root campaign_name=$name ranks_per_node=$pp cluster_file=$cluster
note="Emulated cluster (scripts/emucluster.sh) on one $(getconf _NPROCESSORS_ONLN)-core VM: 4 nodes, each capped to \
$node_cpu CPU (cgroup CPU quota), links shaped to $bw with tc tbf (no added latency); jobs one at a \
time, each released once the 1-minute load was at most $max_load (load.tsv: before and after every run); \
$([[ $order == series ]] && echo "each series whole, then its repeat" || echo "a point's repeats one after the other")."
# One campaign for the block-placed series (dp, ppdp) and, for ppdp-bynode, a
# second one in NAME/bynode/: scaletrain-analyze takes runs of one layout and
# size as repeats of one point, and the placement is not part of a layout.
all_names=() all_ids=() analyze_ids=() camps=()
letters=abcdefghijklmnopqrstuvwxyz
submit_job() {  # submit_job KIND NODES LETTER: one repeat of one point, held
  local k=$1 c=$2 x=$3
  extra_sbatch=(--hold) placement=block
  case $k in
    dp)
      submit "$(printf 'dp-n%d-r%04d-%s' "$c" "$c" "$x")" "$c" "$c" -- \
        --config "configs/models/$model.yaml" --set "model.seq_len=$seq" --set "train.steps=$steps" \
        --set "train.micro_batch=$mb" --set train.grad_accum=1 --set parallel.dp=0 \
        --set checkpoint.interval=0 "${common_sets[@]}"
      ;;
    ppdp | ppdp-bynode)
      if [[ $k == ppdp-bynode ]]; then
        ((c >= 2)) || return 0
        placement=cyclic  # submit's: mpirun --rank-by node in scaletrain.sbatch
      fi
      submit "$(printf '%s-n%d-r%04d-%s' "$k" "$c" $((c * pp)) "$x")" "$c" $((c * pp)) -- \
        --config "configs/models/$model.yaml" --set "model.seq_len=$seq" --set "train.steps=$steps" \
        --set "parallel.pp=$pp" --set "train.micro_batch=$pp_mb" --set "train.grad_accum=$pp_ga" \
        --set parallel.dp=0 --set checkpoint.interval=0 "${common_sets[@]}"
      ;;
  esac
}
submit_series() {  # submit_series KIND...: every repeat of those series into the current campaign
  local rep k c
  if [[ $order == series ]]; then  # every series whole, then again
    for ((rep = 0; rep < repeats; rep++)); do
      for k in "$@"; do for c in "${counts[@]}"; do submit_job "$k" "$c" "${letters:rep:1}"; done; done
    done
  else  # paired: a point's repeats one after the other
    for k in "$@"; do
      for c in "${counts[@]}"; do
        for ((rep = 0; rep < repeats; rep++)); do submit_job "$k" "$c" "${letters:rep:1}"; done
      done
    done
  fi
  extra_sbatch=(--hold)
  campaign_finish
  local n=${#job_ids[@]} i
  for ((i = 0; i < n - 1; i++)); do all_names+=("$camp/runs/${pending_names[$i]}") all_ids+=("${job_ids[$i]}"); done
  analyze_ids+=("${job_ids[-1]}")
  camps+=("$camp")
}
block=() bynode=0
for k in "${kinds[@]}"; do if [[ $k == ppdp-bynode ]]; then bynode=1; else block+=("$k"); fi; done
if ((${#block[@]})); then
  campaign_init weak-scaling "multinode-$model" "$invocation"
  trainer_common_sets
  submit_series "${block[@]}"
fi
if ((bynode)); then
  results=$out_root/$name campaign_name=bynode
  note="$note Ranks placed round robin over the nodes (mpirun --rank-by node): each node holds one whole pipeline."
  if ((${#block[@]} == 0)); then mkdir -p "$study"; fi
  campaign_init weak-scaling "multinode-$model" "$invocation"
  trainer_common_sets
  submit_series ppdp-bynode
fi

# Release the runs one at a time: each once the 1-minute load is at most
# --max-load (or after --load-wait seconds, then marked), the load recorded
# before and after it. A run is BUSY when the load before it exceeded
# --max-load, or the load after it exceeded --max-load plus what the run
# itself adds (its ranks x --node-cpu: a rank is runnable, so counted, while
# its node is not throttled).
printf 'run\tjob\tnodes\tstart_utc\tload_before\tend_utc\tload_after\tverdict\n' >"$study/load.tsv"
busy=$cal_busy  # a calibration under load already spoils every prediction
state() { squeue -h -j "$1" -o %T 2>/dev/null || true; }
for i in "${!all_names[@]}"; do
  dir=${all_names[$i]} id=${all_ids[$i]}
  run=$(basename "$dir")
  nodes=$(sed -E 's/^[a-z-]*-n([0-9]+)-.*/\1/' <<<"$run")
  ranks=$(sed -E 's/^.*-r0*([0-9]+)-[a-z]$/\1/' <<<"$run")
  for ((w = 0; w < load_wait; w += 2)); do above "$(load1)" "$max_load" || break; sleep 2; done
  before=$(load1) t0=$(date -u +%H:%M:%S)
  scontrol release "$id"
  echo "== $run (job $id): load before $before"
  for ((w = 0; w < 7200; w++)); do
    s=$(state "$id")
    [[ -z $s || $s == COMPLETED || $s == FAILED || $s == CANCELLED || $s == TIMEOUT ]] && break
    sleep 1
  done
  after=$(load1) t1=$(date -u +%H:%M:%S)
  allowed=$(awk -v m="$max_load" -v n="$ranks" -v c="$node_cpu" 'BEGIN { print m + n * c }')
  verdict=ok
  if above "$before" "$max_load" || above "$after" "$allowed"; then verdict=BUSY busy=1; fi
  [[ -f $dir/run.json ]] || verdict=FAILED
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$id" "$nodes" "$t0" "$before" "$t1" "$after" "$verdict" >>"$study/load.tsv"
  echo "   load after $after: $verdict"
done
for i in "${!analyze_ids[@]}"; do
  scontrol release "${analyze_ids[$i]}"
  for ((w = 0; w < 1800; w++)); do
    [[ -z $(squeue -h -j "${analyze_ids[$i]}" -o %i 2>/dev/null) ]] && break
    sleep 2
  done
  [[ -f ${camps[$i]}/README.md ]] || { echo "multinode-study: the analysis of ${camps[$i]} did not finish (job ${analyze_ids[$i]})" >&2; exit 1; }
done
runs=()
for c in "${camps[@]}"; do runs+=("$c"/runs/*/); done

echo "== predicted against measured"
cp "$cluster" "$study/cluster.yaml"
sed -i "s|--out '$cluster'|--out $study/cluster.yaml|; s|--out $cluster|--out $study/cluster.yaml|" "$study/cluster.yaml"
"$plan" compare --cluster "$study/cluster.yaml" "${runs[@]}" --out "$study/compare"
# The same calibration again after the runs: how far the emulated cluster's
# own speed moved while they ran (a shared VM drifts by the hour), which
# bounds what any one calibration can predict.
if ((calibrated_here)); then
  echo "== calibrate again after the runs"
  calibrate_emu "$study/cluster-after.yaml"
  sed -i "s|--out '[^']*cluster-after.yaml'|--out $study/cluster-after.yaml|; s|--out [^ \"]*cluster-after.yaml|--out $study/cluster-after.yaml|" "$study/cluster-after.yaml"
  "$plan" compare --cluster "$study/cluster-after.yaml" "${runs[@]}" --out "$study/compare-after"
fi
((cal_busy == 0)) || busy=1
{
  printf 'calibration\tstart_utc\tload_before\tend_utc\tload_after\tverdict\n'
  for l in "${cal_lines[@]}"; do printf '%s\n' "$l"; done
} >"$study/calibration.tsv"
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "emulated cluster: 4 nodes, node CPU quota $node_cpu, links $bw (tc tbf both directions), $(getconf _NPROCESSORS_ONLN) cores"
  echo "series ${kinds[*]}; nodes ${counts[*]}; $repeats repeat(s), order $order; model $model, seq_len $seq, $steps steps"
  echo "dp: 1 rank per node, micro_batch $mb; ppdp: pp $pp ($pp ranks per node), micro_batch $pp_mb, grad_accum $pp_ga"
  echo "load average at start: $load0; at end: $load_end (every run: load.tsv; the calibrations: calibration.tsv)"
  echo "command: $invocation"
  echo "re-predict: $plan compare --cluster $study/cluster.yaml ${camps[*]/%//runs/*/} --out $study/compare"
} >"$study/study.txt"
# load_section [CAMPAIGN]: the machine load before and after each run (load.tsv),
# only CAMPAIGN's runs when given: every README that publishes step times
# carries the load they were measured at.
load_section() {
  echo
  echo "## Machine load per run (scripts/multinode-study.sh)"
  echo
  if ((busy)); then
    echo "**BUSY: at least one run or calibration of the study started above the 1-minute load its cores can serve ($max_load) or ended above it plus its own share (ranks x $node_cpu); its figures measure the machine, not the cluster. Do not publish them.**"
  else
    echo "Every run and calibration started at a 1-minute load of at most $max_load (the VM's $(getconf _NPROCESSORS_ONLN) cores) and ended at most that plus its own share (ranks x $node_cpu)."
  fi
  if ((${#cal_lines[@]})); then
    echo
    echo "| calibration | start (UTC) | load before | end (UTC) | load after | verdict |"
    echo "|---|---|---|---|---|---|"
    for l in "${cal_lines[@]}"; do echo "| ${l//$'\t'/ | } |"; done
  fi
  echo
  echo "| run | job | nodes | start (UTC) | load before | end (UTC) | load after | verdict |"
  echo "|---|---|---|---|---|---|---|---|"
  tail -n +2 "$study/load.tsv" | while IFS=$'\t' read -r a b c d e f g h; do
    [[ -z ${1:-} || -d $1/runs/$a ]] && echo "| $a | $b | $c | $d | $e | $f | $g | $h |"
  done
  return 0
}
# load_header CAMPAIGN: one line under the README's note with the range of
# the 1-minute load its runs started and ended at, and the study's load
# average at its start and end, so the figures' first screen says the load.
load_header() {
  local line
  line=$(tail -n +2 "$study/load.tsv" | while IFS=$'\t' read -r a _ _ _ e _ g _; do
    [[ $1 == "$study" || -d $1/runs/$a ]] && echo "$e $g"
  done | awk 'NR == 1 { bl = bh = $1; al = ah = $2 }
    { if ($1 < bl) bl = $1; if ($1 > bh) bh = $1; if ($2 < al) al = $2; if ($2 > ah) ah = $2 }
    END { if (NR) printf "%s-%s before its runs, %s-%s after them", bl, bh, al, ah }')
  line="Machine load (1-minute): $line on $(getconf _NPROCESSORS_ONLN) cores; load average (1, 5, 15 min) $load0 at the study's start, $load_end at its end (every run: load.tsv)."
  awk -v l="$line" '{ print } !done && /^Note: / { print ""; print l; done = 1 }' "$1/README.md" >"$1/README.md.tmp" &&
    mv "$1/README.md.tmp" "$1/README.md"
}
for c in "${camps[@]}"; do load_header "$c"; done
for c in "${camps[@]}"; do [[ $c == "$study" ]] || load_section "$c" >>"$c/README.md"; done
{
  load_section
  echo
  echo "## Predicted against measured (scaletrain-plan compare, cluster.yaml calibrated on this emulated cluster)"
  echo
  tail -n +2 "$study/compare/compare.md"
  echo
  echo "Per run against issue 33's targets (step time within 15%, exposed communication within 30%;"
  echo "a run's measured comm_exposed_s counts a pipeline receive's whole wait, bubble included, so"
  echo "the waits are compared whole and stage against stage: the waits (step - fwd - bwd - optimizer)"
  echo "of the stage whose ranks waited longest against that stage's predicted step less its own work):"
  echo
  awk -F, 'NR > 1 {
      n++; s = $11 < 0 ? -$11 : $11; if (s <= 0.15) ok++
      if ($15 > 0.001) { m++; e = $28 < 0 ? -$28 : $28; if (e <= 0.30) eok++ }
    } END {
      printf "- step time within 15%%: %d of %d runs\n", ok, n
      printf "- exposed communication and pipeline waits within 30%%: %d of %d runs that measured some\n", eok, m
    }' "$study/compare/compare.csv"
  echo
  echo "## Repeats (measured step time, slowest rank, median of the steady-state window)"
  echo
  echo "Beside each repeat, what the same work cost its ranks in CPU time a step (telemetry cpu_s,"
  echo "median over ranks and window steps; scaletrain-analyze campaign's Repeats table): when the"
  echo "slower repeat's work also cost more CPU time, the host's speed moved between them."
  echo
  echo "| point | runs | step ms | spread (max/min - 1) | CPU ms / step | slowest against fastest, CPU / step |"
  echo "|---|---|---|---|---|---|"
  # Each point's repeats as scaletrain-analyze campaign checked them (campaign.json:
  # every run's step and CPU time a step, the point's repeats_check).
  jsons=()
  for c in "${camps[@]}"; do jsons+=("$c/analysis/campaign.json"); done
  python3 - "${jsons[@]}" <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    runs = {r["dir"].rstrip("/"): r for r in d["runs"]}
    for p in d["points"]:
        if len(p["runs"]) < 2:
            continue
        rs = [runs[x.rstrip("/")] for x in p["runs"]]
        q = p["repeats_check"]
        print("| %s | %d | %s | %.1f%% | %s | %s |" % (
            os.path.basename(p["runs"][0].rstrip("/"))[:-2], len(rs),
            ", ".join("%.0f" % (r["step_time_s"]["p50"] * 1e3) for r in rs),
            100 * q["step_spread"],
            ", ".join("%.0f" % (r["cpu_s_step"] * 1e3) if r.get("cpu_s_step") else "-" for r in rs),
            "-" if q["cpu_change"] is None else "%+.1f%%" % (100 * q["cpu_change"])))
PY
  echo
  if [[ -f $study/compare-after/compare.csv ]]; then
    echo "## The same cluster calibrated again after the runs (cluster-after.yaml, compare-after/)"
    echo
    echo "How far the emulated cluster's own speed moved while the runs ran: each run predicted from"
    echo "the calibration before the runs and from the one after them."
    echo
    echo "| run | step measured ms | predicted before ms | error | predicted after ms | error |"
    echo "|---|---|---|---|---|---|"
    awk -F, 'FNR == 1 { f++; next }
      f == 1 { pb[$1] = $9; eb[$1] = $11; m[$1] = $10; order[++k] = $1 }
      f == 2 { pa[$1] = $9; ea[$1] = $11 }
      END { for (i = 1; i <= k; i++) { r = order[i]
        printf "| %s | %.0f | %.0f | %+.1f%% | %.0f | %+.1f%% |\n", r, m[r] * 1e3, pb[r] * 1e3, 100 * eb[r], pa[r] * 1e3, 100 * ea[r] } }' \
      "$study/compare/compare.csv" "$study/compare-after/compare.csv"
    echo
    echo "Before: $(grep -o 'step time MAPE [0-9.]*%' "$study/compare/compare.md" | head -1); after: $(grep -o 'step time MAPE [0-9.]*%' "$study/compare-after/compare.md" | head -1)."
    echo
  fi
  echo "Re-predict these runs with the current planner (one command, from the repository root):"
  echo
  echo '```'
  echo "build/analysis/scaletrain-plan compare --cluster $study/cluster.yaml ${camps[*]/%//runs/*/} --out $study/compare"
  echo '```'
} >>"$study/README.md"
echo "multinode-study: done: $study"
((busy == 0)) || { echo "multinode-study: some runs were BUSY (load.tsv); do not publish them" >&2; exit 4; }
