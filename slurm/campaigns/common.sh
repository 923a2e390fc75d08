# shellcheck shell=bash disable=SC2034  # variables are read by the drivers that source this
# common.sh: what every campaign driver shares (sourced, not run): the site
# flags (account, partition, QoS, time, data, GPUs) from flags or the
# environment, the campaign folder, one sbatch line per configuration
# (printed under --dry-run, submitted otherwise) once the planner has passed
# every job (plan_check: a job predicted not to fit stops the driver unless
# --force), and the final dependent job
# that analyses the campaign and writes its README.md. Nothing site-specific is
# hardcoded: an unset account, partition or QoS is simply not passed to sbatch.
# Drivers: weak_scaling.sh, mfu_sweep.sh, ckpt_overhead.sh (docs/campaigns.md).

ST_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Site settings: environment first, flags override (parse_common_flag).
account=${SCALETRAIN_ACCOUNT:-}
partition=${SCALETRAIN_PARTITION:-}
qos=${SCALETRAIN_QOS:-}
time_limit=${SCALETRAIN_TIME:-}
data_path=${SCALETRAIN_DATA:-}
results=${SCALETRAIN_RESULTS:-results}
gpus_per_node=${SCALETRAIN_GPUS_PER_NODE:-0}
ranks_per_node=${SCALETRAIN_RANKS_PER_NODE:-}
cpus_per_task=${SCALETRAIN_CPUS_PER_TASK:-}
exclusive=${SCALETRAIN_EXCLUSIVE:-1}
cluster_file=${SCALETRAIN_CLUSTER_FILE:-}
plan_bin=${SCALETRAIN_PLAN:-}
force=0
local_run=0
dry_run=0
campaign_name=""
note=""
extra_sbatch=()
extra_sets=()

COMMON_USAGE="site flags (environment variable in brackets; flags win):
  -A, --account A        sbatch --account [SCALETRAIN_ACCOUNT]
  -p, --partition P      sbatch --partition [SCALETRAIN_PARTITION]
  -q, --qos Q            sbatch --qos [SCALETRAIN_QOS]
  -t, --time T           sbatch --time per job [SCALETRAIN_TIME]
  --data PATH            token file (data.source=file); default synthetic [SCALETRAIN_DATA]
  --results DIR          parent of the campaign folder, default results [SCALETRAIN_RESULTS]
  --name NAME            campaign folder name (default: kind-model-UTC date)
  --note TEXT            a remark for the README (e.g. what else ran on the nodes)
  --gpus-per-node G      GPUs per node; one rank per GPU; 0 = CPU partition [SCALETRAIN_GPUS_PER_NODE]
  --ranks-per-node R     ranks per node (default G, or 1 on CPU) [SCALETRAIN_RANKS_PER_NODE]
  --cpus-per-task C      CPU threads per rank (default: 1 on CPU partitions, unset on GPU) [SCALETRAIN_CPUS_PER_TASK]
  --shared               do not ask for whole nodes (default --exclusive) [SCALETRAIN_EXCLUSIVE=0]
  --sbatch ARG           extra sbatch argument, repeatable (e.g. --sbatch=--constraint=h100)
  --set K=V              extra trainer override for every job, repeatable
  --cluster FILE         cluster file describing the nodes: the planner checks every job
                         against it before it is submitted, and every job prices its
                         prediction with it (runtime.cluster; a file outside the
                         repository is copied to the campaign's cluster.yaml first)
                         (default configs/clusters/h100-sxm-80gb.yaml with
                         --gpus-per-node, else cpu-local.yaml) [SCALETRAIN_CLUSTER_FILE]
  --force                submit jobs the planner predicts not to fit
  --local                no Slurm: run the jobs one after another on this machine
                         (slurm/scaletrain.sbatch under mpirun), the load average
                         recorded before and after each in the campaign's load.txt,
                         then the analysis (finish.sbatch)
  --dry-run              print the sbatch lines, submit nothing, write nothing"

# parse_common_flag "$@": consumes one common flag; sets `shift_by` (0 = not ours).
parse_common_flag() {
  shift_by=2
  case $1 in
    -A | --account) account=$2 ;;
    -p | --partition) partition=$2 ;;
    -q | --qos) qos=$2 ;;
    -t | --time) time_limit=$2 ;;
    --data) data_path=$2 ;;
    --results) results=$2 ;;
    --name) campaign_name=$2 ;;
    --note) note=$2 ;;
    --gpus-per-node) gpus_per_node=$2 ;;
    --ranks-per-node) ranks_per_node=$2 ;;
    --cpus-per-task) cpus_per_task=$2 ;;
    --sbatch) extra_sbatch+=("$2") ;;
    --sbatch=*) extra_sbatch+=("${1#--sbatch=}"); shift_by=1 ;;
    --set) extra_sets+=("$2") ;;
    --cluster) cluster_file=$2 ;;
    --force) force=1; shift_by=1 ;;
    --local) local_run=1; shift_by=1 ;;
    --shared) exclusive=0; shift_by=1 ;;
    --dry-run) dry_run=1; shift_by=1 ;;
    *) shift_by=0 ;;
  esac
  if ((shift_by == 2 && $# < 2)); then campaign_die "$1 needs a value"; fi
  return 0
}

campaign_die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }

# campaign_init KIND NAME_PREFIX INVOCATION: fixes the campaign folder
# ($results/<--name or NAME_PREFIX-UTC date>) and records the invocation.
# Paths stay relative to the repository root when they are inside it.
campaign_init() {
  local kind=$1 prefix=$2 invocation=$3
  cd "$ST_ROOT" || exit 2
  [[ $gpus_per_node =~ ^[0-9]+$ ]] || campaign_die "--gpus-per-node '$gpus_per_node': expected a number"
  if [[ -z $ranks_per_node ]]; then
    if ((gpus_per_node > 0)); then ranks_per_node=$gpus_per_node; else ranks_per_node=1; fi
  fi
  [[ $ranks_per_node =~ ^[1-9][0-9]*$ ]] || campaign_die "--ranks-per-node '$ranks_per_node': expected a positive number"
  if ((gpus_per_node > 0 && ranks_per_node != gpus_per_node)); then
    campaign_die "one rank per GPU: --ranks-per-node $ranks_per_node differs from --gpus-per-node $gpus_per_node"
  fi
  if [[ -z $cpus_per_task ]] && ((gpus_per_node == 0)); then cpus_per_task=1; fi
  [[ -z $cpus_per_task || $cpus_per_task =~ ^[1-9][0-9]*$ ]] || campaign_die "--cpus-per-task '$cpus_per_task': expected a positive number"
  # The cluster file that describes where the jobs run: the planner checks
  # every job against it and every job prices its start-up prediction with
  # it (runtime.cluster), so run.json, the report and the plots name it.
  if [[ -z $cluster_file ]]; then
    if ((gpus_per_node > 0)); then cluster_file=configs/clusters/h100-sxm-80gb.yaml; else cluster_file=configs/clusters/cpu-local.yaml; fi
  fi
  [[ -f $cluster_file ]] || campaign_die "--cluster '$cluster_file': no such cluster file (configs/clusters/*.yaml)"
  [[ -z $campaign_name ]] && campaign_name="$prefix-$(date -u +%Y%m%d-%H%M%S)"
  camp="$results/$campaign_name"
  if ((dry_run == 0)); then
    [[ -e $camp ]] && campaign_die "campaign folder '$camp' exists; pick another --name"
    mkdir -p "$camp/runs" "$camp/slurm"
    echo 'runs/*/checkpoints/' >"$camp/.gitignore"
    # A cluster file outside the repository (a calibration in a scratch
    # folder) travels with the campaign: the runs name it by a path that
    # stays valid.
    if [[ $(realpath "$cluster_file") != "$ST_ROOT"/* ]]; then
      cp "$cluster_file" "$camp/cluster.yaml"
      cluster_file=$camp/cluster.yaml
    fi
    {
      echo "# $kind campaign, submitted $(date -u +%Y-%m-%dT%H:%M:%SZ)"
      echo "# driver invocation (from the repository root):"
      echo "$invocation"
      if [[ -n $note ]]; then echo "# note: ${note//$'\n'/ }"; fi
      echo "# sbatch lines:"
    } >"$camp/invocation.txt"
  fi
  job_ids=()
  pending=()
  pending_names=()
  pending_after=()
  declare -gA job_of=()
}

# trainer_common_sets: overrides every job of a campaign gets.
trainer_common_sets() {
  common_sets=()
  if [[ -n $data_path ]]; then common_sets+=(--set data.source=file --set "data.path=$data_path"); fi
  local s
  for s in "${extra_sets[@]}"; do common_sets+=(--set "$s"); done
}

# submit NAME NODES RANKS -- TRAINER_ARGS...: one job, run folder
# $camp/runs/NAME, job log $camp/slurm/NAME-<jobid>.out.
submit() {
  local name=$1 nodes=$2 ranks=$3
  shift 4
  local per_node=$(((ranks + nodes - 1) / nodes))
  local line=(sbatch --parsable --job-name="$campaign_name:$name" --nodes="$nodes" --ntasks="$ranks"
    --ntasks-per-node="$per_node" --output="$camp/slurm/$name-%j.out")
  [[ -n $account ]] && line+=(--account="$account")
  [[ -n $partition ]] && line+=(--partition="$partition")
  [[ -n $qos ]] && line+=(--qos="$qos")
  [[ -n $time_limit ]] && line+=(--time="$time_limit")
  ((gpus_per_node > 0)) && line+=(--gpus-per-node="$gpus_per_node")
  [[ -n $cpus_per_task ]] && line+=(--cpus-per-task="$cpus_per_task")
  ((exclusive == 1)) && line+=(--exclusive)
  # $placement (block, the default, or cyclic): which node each rank runs on
  # (scaletrain.sbatch's SCALETRAIN_PLACEMENT).
  [[ ${placement:-block} != block ]] && line+=(--export="ALL,SCALETRAIN_PLACEMENT=$placement")
  line+=("${extra_sbatch[@]}" slurm/scaletrain.sbatch "$@" --set "runtime.cluster=$cluster_file"
    --set "runtime.name=$name" --out "$camp/runs/$name")
  plan_check "$name" "$ranks" "$@"
  # Submitted by campaign_finish once every job has passed the planner.
  if ((local_run == 1)); then
    line=(env SLURM_NTASKS="$ranks" SLURM_NNODES="$nodes" SLURM_JOB_NAME="$campaign_name:$name"
      SCALETRAIN_PLACEMENT="${placement:-block}"
      ${cpus_per_task:+SLURM_CPUS_PER_TASK=$cpus_per_task}
      SCALETRAIN_LAUNCHER_ARGS="${SCALETRAIN_LAUNCHER_ARGS:---oversubscribe}"
      bash slurm/scaletrain.sbatch "$@" --set "runtime.cluster=$cluster_file" --set "runtime.name=$name" --out "$camp/runs/$name")
  fi
  pending+=("$(printf '%q ' "${line[@]}")")
  pending_names+=("$name")
  pending_after+=("${after:-}")
}

# plan_check NAME RANKS TRAINER_ARGS...: the planner's verdict on one job
# (plan_guard.py): a job predicted not to fit stops the driver (exit 3) with
# its predicted peak and the nearest feasible layout, unless --force.
plan_check() {
  local name=$1 ranks=$2
  shift 2
  local cl=$cluster_file plan=$plan_bin
  [[ -z $plan ]] && plan=$ST_ROOT/build/analysis/scaletrain-plan
  if [[ ! -x $plan ]]; then
    ((force == 1)) && { echo "plan_check: $name not checked ('$plan' not built; --force)" >&2; return 0; }
    campaign_die "the planner '$plan' is not built (set SCALETRAIN_PLAN); --force submits unchecked"
  fi
  local rc=0
  python3 "$ST_ROOT/slurm/campaigns/plan_guard.py" --plan "$plan" --cluster "$cl" --devices "$ranks" \
    --devices-per-node "$ranks_per_node" --name "$name" -- "$@" >&2 || rc=$?
  ((rc == 0)) && return 0
  if ((rc == 3 && force == 1)); then
    echo "plan_check: submitting $name anyway (--force)" >&2
    return 0
  fi
  if ((rc == 3)); then
    # Nothing was submitted yet: leave no campaign folder behind.
    if ((dry_run == 0)) && [[ -n ${camp:-} && -d $camp ]]; then rm -rf "$camp"; fi
    exit 3
  fi
  campaign_die "plan check of $name failed (exit $rc)"
}

# quote_args ARGS...: shell words, quoted only where the shell needs it.
quote_args() {
  local a out=()
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,%+@-]+$ ]]; then out+=("$a"); else out+=("$(printf '%q' "$a")"); fi
  done
  echo "${out[*]}"
}

# emit_line SBATCH_ARGV...: print (dry run) or submit and record the job id.
emit_line() {
  local q
  q=$(quote_args "$@")
  if ((dry_run == 1)); then
    echo "$q"
    return 0
  fi
  echo "$q" >>"$camp/invocation.txt"
  local id
  id=$("$@") || campaign_die "sbatch failed: ${q% }"
  id=${id%%;*}
  job_ids+=("$id")
  echo "submitted $id: ${q% }"
}

# campaign_finish: the dependent job that analyses the campaign once every
# job has ended (afterany: a failed run is reported, not waited for forever).
# shellcheck disable=SC2120  # the arguments are optional
campaign_finish() {  # campaign_finish [scaletrain-analyze campaign args...]
  local dep="afterany"
  local id line i
  if ((local_run == 1)); then
    campaign_run_local "$@"
    return
  fi
  for i in "${!pending[@]}"; do
    eval "line=(${pending[$i]})"
    # A job after another (a restore from its checkpoint): afterok on its id.
    if [[ -n ${pending_after[$i]} ]]; then
      id=${job_of[${pending_after[$i]}]:-JOBID}
      line=("${line[0]}" --dependency="afterok:$id" "${line[@]:1}")
    fi
    emit_line "${line[@]}"
    ((dry_run == 1)) || job_of[${pending_names[$i]}]=${job_ids[-1]}
  done
  for id in "${job_ids[@]}"; do dep+=":$id"; done
  ((${#job_ids[@]} == 0)) && dep="afterany:JOBIDS"
  line=(sbatch --parsable --job-name="$campaign_name:analyze" --nodes=1 --ntasks=1
    --dependency="$dep" --kill-on-invalid-dep=no --output="$camp/slurm/analyze-%j.out")
  [[ -n $account ]] && line+=(--account="$account")
  [[ -n $partition ]] && line+=(--partition="$partition")
  [[ -n $qos ]] && line+=(--qos="$qos")
  line+=("${extra_sbatch[@]}" slurm/campaigns/finish.sbatch "$camp" "$@")
  emit_line "${line[@]}"
  if ((dry_run == 0)); then
    echo "campaign folder: $camp (README.md appears when job ${job_ids[-1]} has run)"
    echo "${job_ids[-1]}" >"$camp/slurm/analyze.jobid"
  fi
}

# campaign_run_local [analyze args...]: --local: every job now, one after
# another, with the load average before and after each in load.txt, then
# the analysis.
campaign_run_local() {
  local i line rc
  for i in "${!pending[@]}"; do
    eval "line=(${pending[$i]})"
    if ((dry_run == 1)); then
      echo "$(quote_args "${line[@]}")"
      continue
    fi
    echo "$(quote_args "${line[@]}")" >>"$camp/invocation.txt"
    echo "load before ${pending_names[$i]}: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$camp/load.txt"
    echo "running ${pending_names[$i]} (log $camp/slurm/${pending_names[$i]}-local.out)"
    rc=0
    "${line[@]}" >"$camp/slurm/${pending_names[$i]}-local.out" 2>&1 || rc=$?
    echo "load after ${pending_names[$i]}: $(cut -d' ' -f1-3 /proc/loadavg) (exit $rc)" >>"$camp/load.txt"
  done
  ((dry_run == 1)) && { echo "bash slurm/campaigns/finish.sbatch $camp $*"; return 0; }
  bash slurm/campaigns/finish.sbatch "$camp" "$@"
}
