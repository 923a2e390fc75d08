#!/usr/bin/env bash
# multinode-study.sh: the inter-node cliff on the emulated cluster, measured
# and predicted. Starts scripts/emucluster.sh (4 nodes, every node capped to
# the same CPU share, every link shaped), calibrates scaletrain-plan inside
# node1 with its MPI probe spread one rank per node (so the collectives are
# timed over the shaped links), runs the 1/2/4-node weak-scaling campaign
# through Slurm with slurm/campaigns/weak_scaling.sh (one job at a time), and
# sets the planner's predictions beside the measurements
# (scaletrain-plan compare). Tears the cluster down on every exit. Root only.
#
# Usage: scripts/multinode-study.sh [--build DIR] [--name NAME] [--results DIR]
#          [--bandwidth 1gbit] [--node-cpu 0.45] [--nodes-list 1,2,4]
#          [--model default] [--seq 128] [--micro-batch 2] [--steps 12]
#          [--cluster FILE]   reuse a calibration of this cluster instead of calibrating
# Writes RESULTS/NAME/ (default results/multinode-cpu-<UTC date>): the
# campaign (README.md, runs/, analysis/), cluster.yaml (the calibration),
# compare/ (predicted against measured, with MAPE) and study.txt (settings).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build=build name="multinode-cpu-$(date -u +%Y%m%d)" results=results bw=1gbit node_cpu=0.45
nodes_list=1,2,4 model=default seq=128 mb=2 steps=12 cluster=""
while (($#)); do
  (($# >= 2)) || { echo "multinode-study: $1 needs a value" >&2; exit 2; }
  case $1 in
    --build) build=$2 ;;
    --name) name=$2 ;;
    --results) results=$2 ;;
    --bandwidth) bw=$2 ;;
    --node-cpu) node_cpu=$2 ;;
    --nodes-list) nodes_list=$2 ;;
    --model) model=$2 ;;
    --seq) seq=$2 ;;
    --micro-batch) mb=$2 ;;
    --steps) steps=$2 ;;
    --cluster) cluster=$2 ;;
    *) echo "multinode-study: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
plan=$build/analysis/scaletrain-plan
for b in "$build/app/scaletrain" "$build/analysis/scaletrain-analyze" "$plan"; do
  [[ -x $b ]] || { echo "multinode-study: '$b' not built (cmake --build $build)" >&2; exit 2; }
done
out=$results/$name
[[ -e $out ]] && { echo "multinode-study: '$out' exists; pick another --name" >&2; exit 2; }
why=$(bash scripts/emucluster.sh check) || { echo "multinode-study: $why" >&2; exit 77; }

cdir=$(mktemp -d /tmp/scaletrain-emu-study.XXXXXX)
cleanup() { bash scripts/emucluster.sh stop "$cdir" || true; rm -rf "$cdir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
node_args=()
for i in 1 2 3 4; do node_args+=(--node-cpu "node$i=$node_cpu"); done
bash scripts/emucluster.sh start "$cdir" --nodes 4 --cpus 1 --bandwidth "$bw" "${node_args[@]}" --owner $$
# shellcheck disable=SC1091
source "$cdir/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export SCALETRAIN_BIN=$build/app/scaletrain SCALETRAIN_ANALYZE=$build/analysis/scaletrain-analyze
# mpirun inside each allocation (it starts its daemons with srun): srun --mpi=pmix
# direct launch crashed a node's ranks in MPI_Init now and then here.
export SCALETRAIN_LAUNCHER=mpirun
# The planner's MPI probe, one rank per node (it passes -n R and its own flags).
printf '#!/bin/sh\nexec mpirun --hostfile %q --map-by ppr:1:node "$@"\n' "$cdir/hostfile" >"$cdir/bin/mpiexec-nodes"
chmod +x "$cdir/bin/mpiexec-nodes"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

if [[ -z $cluster ]]; then
  echo "== calibrate inside node1 (probe across nodes)"
  cluster=$cdir/cluster.yaml
  bash scripts/emucluster.sh exec "$cdir" node1 \
    "SCALETRAIN_MPIEXEC='$cdir/bin/mpiexec-nodes' '$plan' calibrate --config configs/models/$model.yaml \
     --set model.seq_len=$seq --devices ${nodes_list} --micro-batch $mb --zero 0 --name emucluster-cpu --out '$cluster'"
fi
[[ -f $cluster ]] || { echo "multinode-study: cluster file '$cluster' not found" >&2; exit 2; }

echo "== weak-scaling campaign, nodes $nodes_list, one rank per node"
slurm/campaigns/weak_scaling.sh --nodes "$nodes_list" --ranks-per-node 1 \
  --model "$model" --set "model.seq_len=$seq" --micro-batch "$mb" --steps "$steps" --name "$name" \
  --sbatch=--job-name="$name" --sbatch=--dependency=singleton --note "Emulated cluster \
(scripts/emucluster.sh) on one 2-core VM: 4 nodes, each capped to $node_cpu CPU, links shaped to \
$bw with tc tbf (no added latency), one rank per node; jobs one at a time. Other developers' \
builds shared the VM (load average $load0 at the start)." --results "$results"
id=$(cat "$out/slurm/analyze.jobid")
for ((i = 0; i < 3600; i++)); do
  [[ -z $(squeue -h -j "$id" -o %i 2>/dev/null) ]] && break
  sleep 2
done
[[ -f $out/README.md ]] || { echo "multinode-study: the campaign did not finish (job $id)" >&2; exit 1; }

echo "== predicted against measured"
cp "$cluster" "$out/cluster.yaml"
"$plan" compare --cluster "$out/cluster.yaml" "$out"/runs/*/ --out "$out/compare"
{
  echo "emulated cluster: 4 nodes, node CPU $node_cpu, links $bw (tc tbf both directions)"
  echo "model $model, seq_len $seq, micro_batch $mb per rank, $steps steps, nodes $nodes_list, 1 rank per node"
  echo "load average at start: $load0; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: scripts/multinode-study.sh --build $build --name $name --bandwidth $bw --node-cpu $node_cpu --nodes-list $nodes_list --model $model --seq $seq --micro-batch $mb --steps $steps"
} >"$out/study.txt"
echo "multinode-study: done: $out"
