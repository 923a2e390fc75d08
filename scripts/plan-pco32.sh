#!/usr/bin/env bash
# Validation 3 of docs/planner.md: the pco32 instance of a published
# parallel-layout benchmark (analysis/reference/pco32.md). Plans its search
# space for the model of configs/plans/pco32.yaml on 32 H100-class GPUs, 4
# per host (8 hosts), with an 80 GB device (the source's device had more:
# its feasible runs peaked at 88.5 GB), then prints how many layouts are
# predicted feasible and where the published best layout (dp 32, ZeRO-2,
# 256 MB buckets, one chunk) lands: in the predicted order (feasible
# first), and by predicted throughput alone. MEMORY_GIB=96 replans with a
# 96 GB device.
#
#   scripts/plan-pco32.sh [BUILD_DIR]            (default: build)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
out=${OUT:-$(mktemp -d /tmp/plan-pco32.XXXXXX)}
mkdir -p "$out"
cluster=$src/configs/clusters/h100-sxm-80gb.yaml
if [[ -n ${MEMORY_GIB:-} ]]; then
  sed "s/^memory_gib: .*/memory_gib: $MEMORY_GIB/" "$cluster" >"$out/cluster.yaml"
  cluster=$out/cluster.yaml
fi
# The published space: dp, tp, pp, cp powers of two (product 32), sp on or
# off, ZeRO 0/2/3, 1/2/4 model chunks, gradient buckets of 64..512 MB.
"$build/analysis/scaletrain-plan" --cluster "$cluster" --devices-per-node 4 \
  --config "$src/configs/plans/pco32.yaml" --devices 32 --global-batch 512 --micro-batch 1 \
  --zero 0,2,3 --chunks 1,2,4 --sp 0,1 --bucket-mb 64,128,256,512 --top 10 --near 3 \
  --out "$out" >"$out/plan.txt"
python3 - "$out/plan.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
L = j["layouts"]
c = j["counts"]
print(f"cluster {j['cluster']['path']}: {j['cluster']['memory_bytes'] / 2**30:.1f} GiB per device, "
      f"{j['cluster']['memory_reserved_bytes'] / 2**30:.1f} GiB reserved")
print(f"layouts {c['layouts']}: {c['feasible']} predicted feasible, {c['over_memory']} over the memory "
      f"limit, {c['invalid']} invalid (divisibility or unsupported)")
best = [i for i, l in enumerate(L) if l["dp"] == 32 and l["zero_stage"] == 2 and l["dp_bucket_mb"] == 256
        and l["num_model_chunks"] == 1 and not l["sp"]]
i = best[0]
b = L[i]
timed = sorted([l for l in L if "time" in l], key=lambda l: -l["time"]["tokens_per_s"])
by_tput = [k for k, l in enumerate(timed) if l["name"] == b["name"]][0]
print(f"published best {b['name']}: predicted peak {b['memory']['total'] / 2**30:.1f} GiB "
      f"({b['memory']['total'] / 1e9:.1f} GB; published 82.6 GB), "
      f"{'feasible' if b['feasible'] else 'over the limit'}; rank {i + 1} of {len(L)} in the predicted order; "
      f"rank {by_tput + 1} of {len(timed)} by predicted tokens/s alone "
      f"({b['time']['tokens_per_s']:.0f} tokens/s against {timed[0]['time']['tokens_per_s']:.0f} for the "
      f"fastest, {timed[0]['name']})")
PY
echo "plan: $out/plan.md"
