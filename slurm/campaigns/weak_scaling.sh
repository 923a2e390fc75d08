#!/usr/bin/env bash
# weak_scaling.sh: a weak-scaling campaign. The per-rank (per-GPU) batch is
# fixed, the job grows: one job per node count (--nodes 1,2,4,8, each with
# --ranks-per-node ranks) or per rank count (--ranks 1,2,4, packed onto as few
# nodes as --ranks-per-node allows). A final dependent job runs
# scaletrain-analyze on the campaign. See docs/campaigns.md.
set -euo pipefail
# shellcheck source=slurm/campaigns/common.sh
source "$(dirname "$0")/common.sh"

usage() {
  cat <<EOF
usage: $(basename "$0") (--nodes LIST | --ranks LIST) [options]
  --nodes LIST           node counts, comma or space separated (e.g. 1,2,4,8)
  --ranks LIST           total rank counts instead (e.g. 1,2,4 on one node)
  --model M              preset in configs/models/ (default tiny)
  --config FILE          run config instead of the preset (its model and settings)
  --steps N              steps per job (default 30)
  --micro-batch B        sequences per rank per micro-batch, fixed (default 4)
  --grad-accum A         micro-batches per step (default 1)
$COMMON_USAGE
EOF
}

nodes_list="" ranks_list="" model=tiny config="" steps=30 micro_batch=4 grad_accum=1
invocation="slurm/campaigns/$(basename "$0") $(quote_args "$@")"
while (($#)); do
  parse_common_flag "$@"
  if ((shift_by > 0)); then shift "$shift_by"; continue; fi
  [[ $1 == -h || $1 == --help ]] && { usage; exit 0; }
  (($# >= 2)) || campaign_die "$1 needs a value (see --help)"
  case $1 in
    --nodes) nodes_list=$2 ;;
    --ranks) ranks_list=$2 ;;
    --model) model=$2 ;;
    --config) config=$2 ;;
    --steps) steps=$2 ;;
    --micro-batch) micro_batch=$2 ;;
    --grad-accum) grad_accum=$2 ;;
    *) campaign_die "unknown option '$1' (see --help)" ;;
  esac
  shift 2
done
[[ -n $nodes_list || -n $ranks_list ]] || campaign_die "give --nodes LIST or --ranks LIST"
[[ -n $nodes_list && -n $ranks_list ]] && campaign_die "give --nodes or --ranks, not both"
if [[ -z $config ]]; then config=configs/models/$model.yaml; fi

campaign_init weak-scaling "weak-scaling-$model" "$invocation"
[[ -f $config ]] || campaign_die "config '$config' not found"
trainer_common_sets

read -r -a counts <<<"${nodes_list//,/ }${ranks_list//,/ }"
for c in "${counts[@]}"; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || campaign_die "count '$c' in the list: expected a positive number"
  if [[ -n $nodes_list ]]; then
    nodes=$c ranks=$((c * ranks_per_node))
  else
    ranks=$c nodes=$(((c + ranks_per_node - 1) / ranks_per_node))
  fi
  name=$(printf 'n%d-r%04d' "$nodes" "$ranks")
  submit "$name" "$nodes" "$ranks" -- --config "$config" --set "train.steps=$steps" \
    --set "train.micro_batch=$micro_batch" --set "train.grad_accum=$grad_accum" \
    --set parallel.dp=0 --set checkpoint.interval=0 "${common_sets[@]}"
done
campaign_finish
