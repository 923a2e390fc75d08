#!/usr/bin/env bash
# ckpt_overhead.sh: a checkpoint-overhead campaign. The same job (model,
# ranks, steps) once without checkpoints and once per checkpoint interval x
# mode (sync, async); scaletrain-analyze reports each run's overhead both
# ways (instrumented stall and step-time excess). See docs/campaigns.md.
set -euo pipefail
# shellcheck source=slurm/campaigns/common.sh
source "$(dirname "$0")/common.sh"

usage() {
  cat <<EOF2
usage: $(basename "$0") [options]
  --intervals LIST       checkpoint intervals in steps (default 5,10)
  --modes LIST           sync, async or both (default sync,async)
  --nodes N              nodes per job (default 1)
  --model M              preset in configs/models/ (default tiny)
  --config FILE          run config instead of the preset
  --steps N              steps per job (default 40)
  --micro-batch B        sequences per rank per micro-batch (default 4)
  --keep-last-n K        checkpoints kept (default 2)
$COMMON_USAGE
EOF2
}

intervals=5,10 modes=sync,async nodes=1 model=tiny config="" steps=40 micro_batch=4 keep=2
invocation="slurm/campaigns/$(basename "$0") $(quote_args "$@")"
while (($#)); do
  parse_common_flag "$@"
  if ((shift_by > 0)); then shift "$shift_by"; continue; fi
  [[ $1 == -h || $1 == --help ]] && { usage; exit 0; }
  (($# >= 2)) || campaign_die "$1 needs a value (see --help)"
  case $1 in
    --intervals) intervals=$2 ;;
    --modes) modes=$2 ;;
    --nodes) nodes=$2 ;;
    --model) model=$2 ;;
    --config) config=$2 ;;
    --steps) steps=$2 ;;
    --micro-batch) micro_batch=$2 ;;
    --keep-last-n) keep=$2 ;;
    *) campaign_die "unknown option '$1' (see --help)" ;;
  esac
  shift 2
done
[[ $nodes =~ ^[1-9][0-9]*$ ]] || campaign_die "--nodes '$nodes': expected a positive number"
if [[ -z $config ]]; then config=configs/models/$model.yaml; fi

campaign_init ckpt-overhead "ckpt-overhead-$model" "$invocation"
[[ -f $config ]] || campaign_die "config '$config' not found"
trainer_common_sets
ranks=$((nodes * ranks_per_node))
base=(--config "$config" --set "train.steps=$steps" --set "train.micro_batch=$micro_batch"
  --set parallel.dp=0 --set "checkpoint.keep_last_n=$keep")

submit "ckpt-none" "$nodes" "$ranks" -- "${base[@]}" --set checkpoint.interval=0 "${common_sets[@]}"
read -r -a ivals <<<"${intervals//,/ }"
read -r -a mlist <<<"${modes//,/ }"
for iv in "${ivals[@]}"; do
  [[ $iv =~ ^[1-9][0-9]*$ ]] || campaign_die "interval '$iv': expected a positive number of steps"
  for mode in "${mlist[@]}"; do
    [[ $mode == sync || $mode == async ]] || campaign_die "mode '$mode': expected sync or async"
    submit "ckpt-i$iv-$mode" "$nodes" "$ranks" -- "${base[@]}" --set "checkpoint.interval=$iv" \
      --set "checkpoint.mode=$mode" "${common_sets[@]}"
  done
done
campaign_finish
