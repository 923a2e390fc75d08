#!/usr/bin/env bash
# mfu_sweep.sh: an MFU sweep. One job per model x sequence length x layout,
# all read from a campaign YAML in configs/campaigns/ (format in
# docs/campaigns.md), then the dependent analysis job (per-model series).
set -euo pipefail
# shellcheck source=slurm/campaigns/common.sh
source "$(dirname "$0")/common.sh"

usage() {
  cat <<EOF2
usage: $(basename "$0") --campaign configs/campaigns/FILE.yaml [options]
  --campaign FILE        models, seq_lens, layouts, steps, batch (docs/campaigns.md)
$COMMON_USAGE
EOF2
}

spec=""
invocation="slurm/campaigns/$(basename "$0") $(quote_args "$@")"
while (($#)); do
  parse_common_flag "$@"
  if ((shift_by > 0)); then shift "$shift_by"; continue; fi
  [[ $1 == -h || $1 == --help ]] && { usage; exit 0; }
  (($# >= 2)) || campaign_die "$1 needs a value (see --help)"
  case $1 in
    --campaign) spec=$2 ;;
    *) campaign_die "unknown option '$1' (see --help)" ;;
  esac
  shift 2
done
[[ -n $spec ]] || campaign_die "give --campaign configs/campaigns/FILE.yaml"
spec_abs=$(cd "$(dirname "$spec")" && pwd)/$(basename "$spec")
[[ -f $spec_abs ]] || campaign_die "campaign file '$spec' not found"

# Expand the YAML into one line per job: name, nodes, ranks, placement (submit
# reads it: block or cyclic), trainer args.
jobs_txt=$(python3 "$ST_ROOT/slurm/campaigns/expand_sweep.py" "$spec_abs") || exit 2
sweep_name=$(head -n 1 <<<"$jobs_txt")
campaign_init mfu-sweep "$sweep_name" "$invocation"
trainer_common_sets
while IFS=$'\t' read -r name nodes ranks placement targs; do
  read -r -a targv <<<"$targs"
  submit "$name" "$nodes" "$ranks" -- "${targv[@]}" --set checkpoint.interval=0 "${common_sets[@]}"
done < <(tail -n +2 <<<"$jobs_txt")
campaign_finish --group-by-model
