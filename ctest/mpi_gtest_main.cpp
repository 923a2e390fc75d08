// main() of every multi-rank gtest binary: MPI with MPI_THREAD_MULTIPLE (as
// the trainer initialises it; ST_TEST_THREAD_LEVEL overrides it, e.g. to test
// the checkpoint's deferred-vote path), gtest output from rank 0 only, exit
// status the worst of all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#ifndef ST_TEST_THREAD_LEVEL
#define ST_TEST_THREAD_LEVEL MPI_THREAD_MULTIPLE
#endif

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, ST_TEST_THREAD_LEVEL, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& l = ::testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
