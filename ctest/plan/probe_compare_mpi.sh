#!/usr/bin/env bash
# test_probe_compare_mpi: probe_compare_mpi.sh PROBE MPIEXEC [MPIEXEC FLAGS...]
# scaletrain-plan-probe --compare-mpi 1 on 2 ranks prints, for each of
# all-reduce, reduce-scatter and all-gather, the trainer's time (coll ...)
# and MPI's own call's (mpi_own ..., with the ratio); --compare-mpi 2 is
# refused by name (exit 2).
set -u
probe=$1
shift
out=$("$@" -n 2 "$probe" --sizes 1048576 --seconds 0.05 --compare-mpi 1) || {
  echo "the probe failed: $out"
  exit 1
}
echo "$out"
for k in all_reduce reduce_scatter all_gather; do
  grep -Eq "^coll $k 2 1048576 [0-9.e+-]+ " <<<"$out" || { echo "no coll line for $k"; exit 1; }
  grep -Eq "^mpi_own $k 2 1048576 [0-9.e+-]+ [(]the trainer's / MPI's: [0-9.]+[)]$" <<<"$out" ||
    { echo "no mpi_own line for $k"; exit 1; }
done
bad=$("$@" -n 1 "$probe" --compare-mpi 2 2>&1)
rc=$?
[[ $rc -eq 2 ]] || { echo "--compare-mpi 2: exit $rc, not 2: $bad"; exit 1; }
grep -q -- "--compare-mpi 2: valid are 0, 1" <<<"$bad" || { echo "no message naming it: $bad"; exit 1; }
echo "ok"
