#!/usr/bin/env bash
# Runs finalize_ack.c on 2 ranks twice: as is, and with mpirun stopped
# (SIGSTOP) for 4 s while the ranks are in MPI_Finalize. Open MPI's fence at
# the start of MPI_Finalize is skipped (ompi_async_mpi_finalize=1) so that
# the ranks reach PMIx_Finalize while mpirun is stopped.
# Usage: results/startup-cpu-20261202/finalize_ack.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/st-finalize-ack-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O1 -o "$work/fin" "$here/finalize_ack.c" || exit 2
for stop in 0 4; do
  rm -f "$work/ready"
  mpirun --mca ompi_async_mpi_finalize 1 -np 2 "$work/fin" "$work/ready" >"$work/out" 2>&1 &
  mp=$!
  for _ in $(seq 300); do [[ -f $work/ready ]] && break; sleep 0.1; done
  if ((stop > 0)); then sleep 0.5; kill -STOP $mp; sleep $stop; kill -CONT $mp; fi
  wait $mp
  echo "launcher stopped ${stop} s: mpirun exit status $?"
  grep -E "took|exiting improperly" "$work/out" | sed 's/^/  /'
done
