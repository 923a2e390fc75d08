// The node-wide exchange behind device selection (label cuda-host, mpi): a
// real multi-rank run gathers each rank's visible bus ids over the node's
// MPI communicator, and every rank reaches the same plan, so a node with
// more ranks than GPUs is refused on all of them with one message.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>

#include "comm/mpi_communicator.hpp"
#include "kernels/cuda/host/device_select.hpp"

namespace {
// The node's ranks as a communicator, as the CUDA backend makes it.
struct Node {
  st::MpiCommunicator world{MPI_COMM_WORLD, "world", 60.0};
  std::unique_ptr<st::MpiCommunicator> comm = world.split_host("node");
};

TEST(DeviceSelectMpi, GathersEveryRanksVisibleSetInRankOrder) {
  Node node;
  const int r = node.comm->rank();
  const int n = node.comm->size();
  // Rank r is bound to one GPU of its own ("0000:0r:00.0"); rank 0 sees two.
  std::vector<std::string> mine{"0000:0" + std::to_string(r) + ":00.0"};
  if (r == 0) mine.push_back("0000:FF:00.0");
  const auto all = st::cuda_host::gather_visible(node.comm.get(), mine);
  ASSERT_EQ(int(all.size()), n);
  ASSERT_EQ(all[0].size(), 2u);
  EXPECT_EQ(all[0][1], "0000:ff:00.0");
  for (int k = 1; k < n; ++k)
    EXPECT_EQ(all[size_t(k)], std::vector<std::string>{"0000:0" + std::to_string(k) + ":00.0"});
  const auto plan = st::cuda_host::plan_devices(all);
  EXPECT_TRUE(plan.ok()) << plan.error;
  // Alone (no communicator): its own list.
  EXPECT_EQ(st::cuda_host::gather_visible(nullptr, mine),
            std::vector<std::vector<std::string>>{mine});
}

TEST(DeviceSelectMpi, OneSharedGpuIsRefusedOnEveryRank) {
  Node node;
  const auto all = st::cuda_host::gather_visible(node.comm.get(), {"0000:41:00.0"});
  const auto plan = st::cuda_host::plan_devices(all);
  const int n = node.comm->size();
  if (n < 2) GTEST_SKIP() << "needs two ranks on one node";
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error.find("GPU 0000:41:00.0 would be shared by node-local ranks 0, 1"),
            std::string::npos)
      << plan.error;
  // Every rank holds the same message.
  const int len = int(plan.error.size());
  int lo = 0, hi = 0;
  MPI_Allreduce(&len, &lo, 1, MPI_INT, MPI_MIN, node.comm->mpi());
  MPI_Allreduce(&len, &hi, 1, MPI_INT, MPI_MAX, node.comm->mpi());
  EXPECT_EQ(lo, hi);
}
}  // namespace
