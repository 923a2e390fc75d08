#!/usr/bin/env bash
# bench-mpi-ring.sh: the reason for runtime.mpi_ring, measured. On the
# emulated cluster (scripts/emucluster.sh: one rank a node, real TCP between
# network namespaces, links shaped, each node under a CPU quota), the
# planner's MPI probe times each large collective the trainer's way (the
# communicator's ring, lib/comm/mpi_communicator.cpp) and with Open MPI's
# own non-blocking call, alternated in one run (scaletrain-plan-probe
# --compare-mpi 1), at each node count and size. Writes OUT/probe-nN.txt
# (the probe's lines), OUT/load.tsv (the 1-minute load before and after
# each run) and OUT/summary.md (the trainer's time / MPI's per kind, size
# and node count: below 1, the ring is faster). Needs root; stops the
# cluster on every exit.
#
# Usage: scripts/bench-mpi-ring.sh --build DIR --out DIR [--nodes-list 2,4]
#          [--sizes B,B,...] [--seconds S] [--bandwidth 1gbit] [--node-cpu 0.45]
#          [--max-load L]   (a run starts once the 1-minute load is at most L;
#                            default: the cores)
set -euo pipefail
cd "$(dirname "$0")/.."
build='' out='' nodes_list=2,4 sizes=1048576,8388608,78643200 seconds=1.5 bw=1gbit node_cpu=0.45
max_load=$(getconf _NPROCESSORS_ONLN)
while (($#)); do
  case $1 in
    --build) build=${2:?} ;;
    --out) out=${2:?} ;;
    --nodes-list) nodes_list=${2:?} ;;
    --sizes) sizes=${2:?} ;;
    --seconds) seconds=${2:?} ;;
    --bandwidth) bw=${2:?} ;;
    --node-cpu) node_cpu=${2:?} ;;
    --max-load) max_load=${2:?} ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench-mpi-ring: unknown argument '$1' (valid: --build, --out, --nodes-list, --sizes, --seconds, --bandwidth, --node-cpu, --max-load)" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -n $build && -n $out ]] || { echo "bench-mpi-ring: --build DIR and --out DIR are required" >&2; exit 2; }
probe=$build/analysis/scaletrain-plan-probe
[[ -x $probe ]] || { echo "bench-mpi-ring: '$probe' not built (cmake --build $build)" >&2; exit 2; }
[[ $nodes_list =~ ^[2-9](,[2-9])*$ ]] || { echo "bench-mpi-ring: --nodes-list '$nodes_list': node counts 2-9, comma-separated" >&2; exit 2; }
[[ -e $out ]] && { echo "bench-mpi-ring: '$out' exists; pick another --out" >&2; exit 2; }
why=$(bash scripts/emucluster.sh check --no-slurm) || { echo "bench-mpi-ring: $why" >&2; exit 77; }
probe=$(realpath "$probe")
mkdir -p "$out"
out=$(realpath "$out")

nmax=$(tr ',' '\n' <<<"$nodes_list" | sort -n | tail -1)
cdir=$(mktemp -d /tmp/scaletrain-emu-ring.XXXXXX)
cleanup() { bash scripts/emucluster.sh stop "$cdir" >/dev/null 2>&1 || true; rm -rf "$cdir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
node_args=()
for ((i = 1; i <= nmax; i++)); do node_args+=(--node-cpu "node$i=$node_cpu"); done
bash scripts/emucluster.sh start "$cdir" --nodes "$nmax" --cpus 1 --bandwidth "$bw" \
  "${node_args[@]}" --no-slurm --owner $$ >/dev/null
# shellcheck disable=SC1091
source "$cdir/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

load1() { cut -d' ' -f1 /proc/loadavg; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
printf 'nodes\tstart_utc\tload_before\tend_utc\tload_after\n' >"$out/load.tsv"
for n in ${nodes_list//,/ }; do
  waited=0
  while above "$(load1)" "$max_load" && ((waited < 600)); do sleep 10; waited=$((waited + 10)); done
  t0=$(date -u +%FT%TZ) l0=$(load1)
  mpirun --hostfile "$cdir/hostfile" --map-by ppr:1:node -n "$n" "$probe" --sizes "$sizes" \
    --seconds "$seconds" --compare-mpi 1 >"$out/probe-n$n.txt"
  printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$t0" "$l0" "$(date -u +%FT%TZ)" "$(load1)" >>"$out/load.tsv"
done

{
  echo "# The communicator's ring against Open MPI's own collectives (emulated cluster)"
  echo
  echo "$(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'): one rank a node, links $bw" \
    "(tc tbf, no added latency), each node capped to $node_cpu CPU; each collective timed for" \
    "$seconds s the trainer's way, then with MPI's own non-blocking call (the ring switched off)," \
    "in one run per node count. Load before and after each run: load.tsv (the host has $(getconf _NPROCESSORS_ONLN) cores)."
  echo
  echo "| kind | nodes | bytes | trainer's (ring) s | MPI's own s | trainer's / MPI's |"
  echo "|---|---|---|---|---|---|"
  for n in ${nodes_list//,/ }; do
    awk '$1 == "coll" && ($2 == "all_reduce" || $2 == "reduce_scatter" || $2 == "all_gather") {
           own[$2 " " $4] = $5 }
         $1 == "mpi_own" { printf "| %s | %s | %s | %.4g | %.4g | %.2f |\n", $2, $3, $4,
                           own[$2 " " $4], $5, own[$2 " " $4] / $5 }' "$out/probe-n$n.txt"
  done
} >"$out/summary.md"
cat "$out/summary.md"
