// NcclCommunicator (lib/comm/nccl_communicator.hpp) against MpiCommunicator
// on the same data: all_reduce, reduce_scatter, all_gather (fp32 and bf16),
// broadcast, barrier, split, and the per-collective byte counters. Runs under
// mpiexec; each rank takes GPU (rank % devices). Exit 77 (skip) when fewer
// GPUs than ranks are visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "comm/nccl_communicator.hpp"
#include "ctest/cuda/gpu_test_util.hpp"

using namespace st::test;

namespace {
st::MpiCommunicator* g_world = nullptr;

std::vector<float> rank_data(size_t n, int rank) {
  auto v = randn(n, 1000 + uint64_t(rank));
  return round_bf16(v);  // bf16-exact, so the bf16 all-reduce is comparable
}

TEST(Nccl, CollectivesMatchMpi) {
  auto nccl = st::make_nccl_communicator(*g_world, "world", 60.0);
  const int R = g_world->rank(), P = g_world->size();
  ASSERT_EQ(nccl->rank(), R);
  ASSERT_EQ(nccl->size(), P);
  for (size_t n : {1ul, 1000ul, 1ul << 20}) {
    // all_reduce
    auto h = rank_data(n * P, R);
    auto ref = h;
    g_world->all_reduce_sum(ref.data(), int64_t(ref.size()));
    auto d = upload(h);
    nccl->all_reduce_sum(d.as<float>(), int64_t(h.size()));
    EXPECT_TRUE(close(download<float>(d, h.size()), ref, 1e-6, "nccl all_reduce fp32"));
    // reduce_scatter
    std::vector<float> rs(n);
    g_world->reduce_scatter_sum(h.data(), rs.data(), int64_t(n));
    auto out = poisoned(n * 4);
    auto d2 = upload(h);
    nccl->reduce_scatter_sum(d2.as<float>(), out.as<float>(), int64_t(n));
    EXPECT_TRUE(close(download<float>(out, n), rs, 1e-6, "nccl reduce_scatter"));
    // all_gather
    std::vector<float> part(h.begin(), h.begin() + long(n)), ag(n * P);
    g_world->all_gather(part.data(), ag.data(), int64_t(n));
    auto dp = upload(part);
    auto dag = poisoned(n * P * 4);
    nccl->all_gather(dp.as<float>(), dag.as<float>(), int64_t(n));
    EXPECT_TRUE(close(download<float>(dag, n * P), ag, 0, "nccl all_gather"));
    // bf16 gradient-bucket all-reduce, asynchronous, ordered into a stream
    auto db = upload(to_bf16(h));
    nccl->all_reduce_sum_typed(db.data(), int64_t(h.size()), st::CommDType::BF16);
    st::cuda::Stream s;
    nccl->wait_on(s.get());
    s.sync();
    EXPECT_TRUE(close(download_bf16(db, h.size()), ref, 1e-2, "nccl all_reduce bf16"));
    // fp32 max (vocab-parallel cross-entropy's row max)
    std::vector<double> mref(h.begin(), h.end());
    g_world->all_reduce_max(mref.data(), int64_t(mref.size()));
    auto dm = upload(h);
    nccl->all_reduce_max_typed(dm.data(), int64_t(h.size()), st::CommDType::F32);
    nccl->wait_on(s.get());
    s.sync();
    EXPECT_TRUE(close(download<float>(dm, h.size()), std::vector<float>(mref.begin(), mref.end()),
                      0, "nccl all_reduce max"));
  }
  // broadcast from the last rank
  std::vector<float> b = rank_data(4096, R), bref = rank_data(4096, P - 1);
  auto dbc = upload(b);
  nccl->broadcast(dbc.as<float>(), 4096, P - 1);
  EXPECT_TRUE(close(download<float>(dbc, 4096), bref, 0, "nccl broadcast"));
  nccl->barrier();
  nccl->synchronize();
  EXPECT_GT(nccl->stats(st::CollKind::AllReduce).calls, 0);
  EXPECT_GT(nccl->stats(st::CollKind::AllReduce).bytes, 0);
}

TEST(Nccl, SplitGroups) {
  auto nccl = st::make_nccl_communicator(*g_world, "world", 60.0);
  const int R = g_world->rank();
  auto sub = nccl->split(R % 2, R, "parity");
  auto msub = g_world->split(R % 2, R, "parity");
  EXPECT_EQ(sub->size(), msub->size());
  EXPECT_EQ(sub->rank(), msub->rank());
  auto h = rank_data(777, R), ref = h;
  msub->all_reduce_sum(ref.data(), 777);
  auto d = upload(h);
  sub->all_reduce_sum(d.as<float>(), 777);
  EXPECT_TRUE(close(download<float>(d, 777), ref, 1e-6, "split all_reduce"));
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string why;
  const int ndev = st::cuda::device_count(&why);
  if (ndev < size) {
    if (rank == 0)
      std::printf("SKIP: %d rank(s) need %d GPU(s), %d visible%s%s\n", size, size, ndev,
                  why.empty() ? "" : ": ", why.c_str());
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(rank % ndev);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 0;
  {
    st::MpiCommunicator world(MPI_COMM_WORLD, "world", 120.0);
    g_world = &world;
    rc = RUN_ALL_TESTS();
    int worst = 0;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rc = worst;
  }
  MPI_Finalize();
  return rc;
}
