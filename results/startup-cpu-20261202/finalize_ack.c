// Shows why ranks that finish training can fail in MPI_Finalize as "exiting
// improperly": Open MPI 4.1's MPI_Finalize ends in PMIx_Finalize, which sends
// the launcher's PMIx server (mpirun) a finalize message and waits at most
// 2 s for its answer; a rank that exits without the answer is one that
// "never finalized" to mpirun. Run it with the launcher stopped for 4 s
// while the ranks finalize (see README.md): every MPI_Finalize returns after
// about 2.0 s and mpirun exits 1 naming a rank "exiting improperly".
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0 && argc > 1) {  // tell the caller the ranks are up
    FILE* f = fopen(argv[1], "w");
    if (f) fclose(f);
  }
  sleep(1);
  const double t0 = MPI_Wtime();
  MPI_Finalize();
  fprintf(stderr, "rank %d: MPI_Finalize took %.2f s\n", r, MPI_Wtime() - t0);
  return 0;
}
