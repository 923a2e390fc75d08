// Helper process for the single-rank checkpoint tests (run as an MPI
// singleton, no mpiexec):
//   ckpt_helper save DIR         commits steps 1 and 2 and exits 0
//   ckpt_helper kill DIR PHASE   commits step 1, then SIGKILLs itself at PHASE
//                                of step 2's save ("dataset", "index_written",
//                                "renamed"), so the crash point is exact.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "test_state.hpp"

using namespace st;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_helper save|kill DIR [PHASE]\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[2], phase = argc > 3 ? argv[3] : "";
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  {
    CheckpointOptions o;
    o.dir = dir;
    o.mode = CkptMode::kAsync;
    o.keep_last_n = 0;
    o.layout = {{"dp", 1}};
    o.test_hook = [&](const std::string& ph, long step) {
      if (mode == "kill" && step == 2 && ph == phase) ::kill(::getpid(), SIGKILL);
    };
    MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
    Checkpointer c(world, o, nullptr);
    for (long step = 1; step <= 2; ++step) {
      auto v = test::layout(1, 0, true);
      test::fill(v, step);
      c.save(step, test::state_of(v, step, 0));
      c.wait();
      if (!c.last_outcome().committed) {
        std::fprintf(stderr, "step %ld failed: %s\n", step, c.last_outcome().error.c_str());
        rc = 1;
      }
    }
    if (mode == "kill") rc = 3;  // the kill did not happen
  }
  MPI_Finalize();
  return rc;
}
