#!/usr/bin/env bash
# ckpt_overhead.sh: a checkpoint-overhead study. Per size (rank or node
# count) the same job once without checkpoints and once per checkpoint
# interval x mode (sync, async), each --repeats times, plus one job that
# restores the first interval's sync checkpoint (the restore time per size).
# finish.sbatch measures the storage's own sequential-write limit with the
# same bytes on the same file system; scaletrain-analyze campaign reports
# overhead against interval per mode, aggregate write bandwidth against ranks
# beside that limit, restore time per size and the optimal interval for an
# MTBF (Young/Daly, --mtbf). See docs/campaigns.md and docs/analysis.md.
# The cost per checkpoint C is the median of each run's checkpoints after
# its first (the first pays one-time costs): every interval needs at least
# 4 of them, so a job runs at least 5 x the largest interval steps.
set -euo pipefail
# shellcheck source=slurm/campaigns/common.sh
source "$(dirname "$0")/common.sh"

usage() {
  cat <<EOF2
usage: $(basename "$0") [options]
  --intervals LIST       checkpoint intervals in steps (default 5,10,20)
  --modes LIST           sync, async or both (default sync,async)
  --nodes LIST           sizes as node counts (default 1), --ranks-per-node ranks each
  --ranks LIST           sizes as rank counts instead (packed onto as few nodes as
                         --ranks-per-node allows)
  --repeats R            runs per configuration (default 1)
  --model M              preset in configs/models/ (default tiny)
  --config FILE          run config instead of the preset
  --steps N              steps per job (default: 40 or 5 x the largest interval, whichever
                         is more; fewer than 5 x the largest interval is refused: C needs
                         4 checkpoints after a run's first)
  --micro-batch B        sequences per rank per micro-batch (default 4)
  --keep-last-n K        checkpoints kept (default 2)
  --no-restore           no restore job per size
$COMMON_USAGE
EOF2
}

intervals=5,10,20 modes=sync,async nodes_list="" ranks_list="" repeats=1 model=tiny config=""
steps="" micro_batch=4 keep=2 restore=1
invocation="slurm/campaigns/$(basename "$0") $(quote_args "$@")"
while (($#)); do
  parse_common_flag "$@"
  if ((shift_by > 0)); then shift "$shift_by"; continue; fi
  [[ $1 == -h || $1 == --help ]] && { usage; exit 0; }
  [[ $1 == --no-restore ]] && { restore=0; shift; continue; }
  (($# >= 2)) || campaign_die "$1 needs a value (see --help)"
  case $1 in
    --intervals) intervals=$2 ;;
    --modes) modes=$2 ;;
    --nodes) nodes_list=$2 ;;
    --ranks) ranks_list=$2 ;;
    --repeats) repeats=$2 ;;
    --model) model=$2 ;;
    --config) config=$2 ;;
    --steps) steps=$2 ;;
    --micro-batch) micro_batch=$2 ;;
    --keep-last-n) keep=$2 ;;
    *) campaign_die "unknown option '$1' (see --help)" ;;
  esac
  shift 2
done
[[ -n $nodes_list && -n $ranks_list ]] && campaign_die "give --nodes or --ranks, not both"
[[ -z $nodes_list && -z $ranks_list ]] && nodes_list=1
[[ $repeats =~ ^[1-9][0-9]*$ ]] || campaign_die "--repeats '$repeats': expected a positive number"
if [[ -z $config ]]; then config=configs/models/$model.yaml; fi

read -r -a ivals <<<"${intervals//,/ }"
read -r -a mlist <<<"${modes//,/ }"
read -r -a counts <<<"${nodes_list//,/ }${ranks_list//,/ }"
max_iv=0
for iv in "${ivals[@]}"; do
  [[ $iv =~ ^[1-9][0-9]*$ ]] || campaign_die "interval '$iv': expected a positive number of steps"
  if ((iv > max_iv)); then max_iv=$iv; fi
done
# C (docs/analysis.md) is the median of the checkpoints after a run's first:
# 4 of them at the largest interval take 5 x that interval steps.
min_steps=$((5 * max_iv))
if [[ -z $steps ]]; then
  steps=$((min_steps > 40 ? min_steps : 40))
elif ! [[ $steps =~ ^[1-9][0-9]*$ ]]; then
  campaign_die "--steps '$steps': expected a positive number"
elif ((steps < min_steps)); then
  campaign_die "--steps $steps gives interval $max_iv only $((steps / max_iv - 1)) checkpoint(s) after the first; the cost per checkpoint needs 4: use --steps $min_steps or more"
fi
campaign_init ckpt-overhead "ckpt-overhead-$model" "$invocation"
[[ -f $config ]] || campaign_die "config '$config' not found"
trainer_common_sets
base=(--config "$config" --set "train.steps=$steps" --set "train.micro_batch=$micro_batch"
  --set parallel.dp=0 --set "checkpoint.keep_last_n=$keep")
for mode in "${mlist[@]}"; do
  [[ $mode == sync || $mode == async ]] || campaign_die "mode '$mode': expected sync or async"
done
for c in "${counts[@]}"; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || campaign_die "size '$c' in the list: expected a positive number"
  if [[ -n $nodes_list ]]; then
    nodes=$c ranks=$((c * ranks_per_node))
  else
    ranks=$c nodes=$(((c + ranks_per_node - 1) / ranks_per_node))
  fi
  size=$(printf 'n%d-r%04d' "$nodes" "$ranks")
  for ((rep = 1; rep <= repeats; ++rep)); do
    submit "$size-none-$rep" "$nodes" "$ranks" -- "${base[@]}" --set checkpoint.interval=0 \
      "${common_sets[@]}"
    for iv in "${ivals[@]}"; do
      for mode in "${mlist[@]}"; do
        submit "$size-i$iv-$mode-$rep" "$nodes" "$ranks" -- "${base[@]}" \
          --set "checkpoint.interval=$iv" --set "checkpoint.mode=$mode" "${common_sets[@]}"
      done
    done
  done
  if ((restore == 1)); then
    # The restore: the first interval's first checkpointed run's last checkpoint,
    # loaded by a job of the same size that then runs 4 more steps.
    src="$size-i${ivals[0]}-${mlist[0]}-1"
    after=$src submit "$size-restore" "$nodes" "$ranks" -- "${base[@]}" \
      --set "train.steps=$((steps + 4))" --set checkpoint.interval=0 \
      --set "checkpoint.dir=$camp/runs/$src/checkpoints" --set checkpoint.resume=auto \
      "${common_sets[@]}"
  fi
done
campaign_finish
