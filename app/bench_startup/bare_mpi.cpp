// The floor that the trainer's start-up and exit are measured against
// (scripts/bench-startup.sh): a program that does only what every MPI job
// does, linked against MPI alone. Each rank notes when main began, when
// MPI_Init_thread returned (at the thread level the trainer asks for) and
// when the job was done; after a barrier rank 0 writes the slowest rank's
// times (seconds since the epoch) as one JSON object to the file named on
// the command line, then every rank calls MPI_Finalize. The script times
// the launcher around it: launch to `init_s` is a bare MPI job's start-up,
// `done_s` to the launcher's exit its exit.
#include <mpi.h>

#include <chrono>
#include <cstdio>

namespace {
double epoch_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int main(int argc, char** argv) {
  const double t_main = epoch_s();
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json (run under mpirun)\n", argv[0]);
    return 2;
  }
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return 1;
  const double t_init = epoch_s();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double mine[2] = {t_main, t_init}, slowest[2] = {0, 0};
  MPI_Reduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t_done = epoch_s();
  int rc = 0;
  if (rank == 0) {
    std::FILE* f = std::fopen(argv[1], "w");
    if (f == nullptr) {
      std::perror(argv[1]);
      rc = 1;
    } else {
      std::fprintf(f,
                   "{\"ranks\": %d, \"thread_level\": %d, \"main_s\": %.6f, \"init_s\": %.6f, "
                   "\"done_s\": %.6f}\n",
                   size, provided, slowest[0], slowest[1], t_done);
      rc = std::fclose(f) == 0 ? 0 : 1;
    }
  }
  MPI_Finalize();
  return rc;
}
