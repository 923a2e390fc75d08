// The ncclCommSplit plan (kernels/cuda/host/nccl_split.hpp; labels
// cuda-host, mpi): on 4 real MPI ranks, the groups a 2 x 2 mesh makes with
// MpiCommunicator::split (rows, columns, the world, diagonals with reversed
// keys, singletons) are gathered, planned, and each planned call is made
// with MPI_Comm_split, whose grouping and ordering are the semantics NCCL
// documents for ncclCommSplit (same color together, ordered by key, ties by
// parent rank; no color: no communicator). Every rank's groups must come
// out with the same members in the same rank order, every rank must hold
// the same plan, and a group of one rank gets no call. The pure rules
// (deduplication, packing, refusals) are checked without MPI.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "kernels/cuda/host/nccl_split.hpp"

namespace {
using st::cuda_host::gather_groups;
using st::cuda_host::plan_nccl_splits;
using Groups = std::vector<std::vector<int>>;

// World ranks of `c`'s members in its rank order.
std::vector<int> members(MPI_Comm c) {
  MPI_Group g, w;
  int n = 0;
  MPI_Comm_group(c, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  MPI_Group_size(g, &n);
  std::vector<int> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) in[size_t(i)] = i;
  MPI_Group_translate_ranks(g, n, in.data(), w, out.data());
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  return out;
}

TEST(NcclSplit, PlannedCallsGiveEveryRanksGroupsInOrder) {
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_EQ(size, 4) << "run with 4 ranks";
  MPI_Comm d;
  MPI_Comm_dup(MPI_COMM_WORLD, &d);
  st::MpiCommunicator world(d, "world", 60.0);
  const int row = rank / 2, col = rank % 2;
  auto rows = world.split(row, col, "row");
  auto cols = world.split(col, row, "col");
  // Diagonals {0,3} and {1,2}, each with the higher world rank first.
  auto diag = world.split(row == col ? 0 : 1, -rank, "diag");
  auto single = world.split(rank, 0, "single");
  const std::vector<MPI_Comm> mine = {rows->mpi(), cols->mpi(), world.mpi(), diag->mpi(),
                                      single->mpi()};
  const auto plan = plan_nccl_splits(size, gather_groups(world.mpi(), mine));
  // rows, columns, world, diagonals: 7 groups; singletons need no communicator.
  ASSERT_EQ(plan.groups.size(), 7u);
  // Every rank holds the same plan.
  std::vector<int> flat;
  for (const auto& c : plan.calls) flat.insert(flat.end(), c.color.begin(), c.color.end());
  int n = int(flat.size()), lo = 0, hi = 0;
  MPI_Allreduce(&n, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&n, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ASSERT_EQ(lo, hi);
  std::vector<int> fmin(flat.size()), fmax(flat.size());
  MPI_Allreduce(flat.data(), fmin.data(), n, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(flat.data(), fmax.data(), n, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(fmin, flat);
  EXPECT_EQ(fmax, flat);
  // Make each call as ncclCommSplit would; collect the groups this rank got.
  Groups got;
  for (const auto& call : plan.calls) {
    const int color = call.color[size_t(rank)];
    MPI_Comm out;
    MPI_Comm_split(world.mpi(), color < 0 ? MPI_UNDEFINED : color, call.key[size_t(rank)], &out);
    if (color < 0) {
      EXPECT_EQ(out, MPI_COMM_NULL);
      continue;
    }
    ASSERT_NE(out, MPI_COMM_NULL);
    got.push_back(members(out));
    EXPECT_EQ(got.back(), plan.groups[size_t(call.groups[size_t(color)])]);
    MPI_Comm_free(&out);
  }
  // Each of this rank's groups of 2+ ranks, exactly once, in MPI's order.
  for (MPI_Comm c : mine) {
    const std::vector<int> want = members(c);
    const auto k = std::count(got.begin(), got.end(), want);
    EXPECT_EQ(k, want.size() < 2 ? 0 : 1) << "group of " << want.size();
  }
  EXPECT_EQ(got.size(), 4u);  // row, column, world, diagonal
}

TEST(NcclSplit, PacksDisjointGroupsIntoOneCall) {
  const auto p = plan_nccl_splits(4, {{0, 1}, {2, 3}, {0, 2}, {1, 3}, {0, 1}, {3}, {0, 1, 2, 3}});
  ASSERT_EQ(p.groups, (Groups{{0, 1}, {0, 1, 2, 3}, {0, 2}, {1, 3}, {2, 3}}));
  ASSERT_EQ(p.calls.size(), 3u);
  EXPECT_EQ(p.call_of, (std::vector<int>{0, 1, 2, 2, 0}));
  EXPECT_EQ(p.calls[0].color, (std::vector<int>{0, 0, 1, 1}));  // {0,1} and {2,3}
  EXPECT_EQ(p.calls[0].key, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(p.calls[2].color, (std::vector<int>{0, 1, 0, 1}));  // {0,2} and {1,3}
  const auto q = plan_nccl_splits(3, {{2, 0}});                 // key order is the group's order
  EXPECT_EQ(q.calls[0].color, (std::vector<int>{0, -1, 0}));
  EXPECT_EQ(q.calls[0].key, (std::vector<int>{1, 0, 0}));
  EXPECT_TRUE(plan_nccl_splits(2, {{0}, {1}}).calls.empty());
}

TEST(NcclSplit, RefusesWhatNcclCannotGive) {
  EXPECT_THROW(plan_nccl_splits(2, {{0, 2}}), st::Error);
  EXPECT_THROW(plan_nccl_splits(2, {{1, 1}}), st::Error);
  EXPECT_THROW(plan_nccl_splits(3, {{0, 1, 2}, {2, 1, 0}}), st::Error);
}
}  // namespace
