// The ncclCommSplit plan (kernels/cuda/host/nccl_split.hpp; labels
// cuda-host, mpi): on 4 real MPI ranks, the groups a 2 x 2 mesh makes with
// MpiCommunicator::split (rows, columns, the world, diagonals with reversed
// keys, singletons, and a dup of the rows: one role each, as
// Backend::make_communicators hands them over) are gathered, planned, and
// each planned call is made with MPI_Comm_split, whose grouping and ordering
// are the semantics NCCL documents for ncclCommSplit (same color together,
// ordered by key, ties by parent rank; no color: no communicator), the way
// the CUDA backend makes them (calls_for picks each group's call). Every
// rank's groups must come out with the same members in the same rank order,
// the rows and their dup from two calls, every rank must hold the same plan,
// and a group of one rank gets no call. The pure rules (deduplication,
// packing, refusals) are checked without MPI.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "kernels/cuda/host/nccl_split.hpp"

namespace {
using st::cuda_host::calls_for;
using st::cuda_host::gather_groups;
using st::cuda_host::plan_nccl_splits;
using st::cuda_host::role_groups;
using st::cuda_host::RoleGroup;
using Groups = std::vector<std::vector<int>>;

// Role k of each member list.
std::vector<RoleGroup> roles(const std::vector<std::pair<int, std::vector<int>>>& g) {
  std::vector<RoleGroup> out;
  for (const auto& [k, r] : g) out.push_back({k, r});
  return out;
}

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
  auto rows2 = rows->dup("row2");
  const std::vector<MPI_Comm> mine = {rows->mpi(), cols->mpi(),   world.mpi(),
                                      diag->mpi(), single->mpi(), rows2->mpi()};
  const auto plan = plan_nccl_splits(size, gather_groups(world, mine));
  // rows, columns, world, diagonals, rows again: 9 groups; singletons need none.
  ASSERT_EQ(plan.groups.size(), 9u);
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
  // Make each call as ncclCommSplit would, keeping what this rank got per call.
  std::vector<std::vector<int>> got(plan.calls.size());
  for (size_t c = 0; c < plan.calls.size(); ++c) {
    const auto& call = plan.calls[c];
    const int color = call.color[size_t(rank)];
    MPI_Comm out;
    MPI_Comm_split(world.mpi(), color < 0 ? MPI_UNDEFINED : color, call.key[size_t(rank)], &out);
    if (color < 0) {
      EXPECT_EQ(out, MPI_COMM_NULL);
      continue;
    }
    ASSERT_NE(out, MPI_COMM_NULL);
    got[c] = members(out);
    EXPECT_EQ(got[c], plan.groups[size_t(call.groups[size_t(color)])].ranks);
    MPI_Comm_free(&out);
  }
  // Each of this rank's groups from the call calls_for names, in MPI's order.
  const auto my = role_groups(world.mpi(), mine);
  const auto at = calls_for(plan, my);
  ASSERT_EQ(at.size(), mine.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    const std::vector<int> want = members(mine[k]);
    EXPECT_EQ(my[k].ranks, want);
    if (want.size() < 2) {
      EXPECT_EQ(at[k], -1) << "group " << k;
      continue;
    }
    ASSERT_GE(at[k], 0) << "group " << k;
    EXPECT_EQ(got[size_t(at[k])], want) << "group " << k;
  }
  EXPECT_NE(at[0], at[5]);  // the rows and their dup: two communicators
}

TEST(NcclSplit, PacksDisjointGroupsIntoOneCall) {
  // Role 0: pairs {0,1} {2,3} (reported by each member); role 1: {0,2} {1,3};
  // role 2: singletons; role 3: the world.
  const auto p = plan_nccl_splits(4, roles({{0, {0, 1}},
                                            {0, {2, 3}},
                                            {1, {0, 2}},
                                            {1, {1, 3}},
                                            {0, {0, 1}},
                                            {2, {0}},
                                            {2, {1}},
                                            {2, {2}},
                                            {2, {3}},
                                            {3, {0, 1, 2, 3}}}));
  ASSERT_EQ(p.groups,
            roles({{0, {0, 1}}, {0, {2, 3}}, {1, {0, 2}}, {1, {1, 3}}, {3, {0, 1, 2, 3}}}));
  ASSERT_EQ(p.calls.size(), 3u);
  EXPECT_EQ(p.call_of, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(p.calls[0].color, (std::vector<int>{0, 0, 1, 1}));  // {0,1} and {2,3}
  EXPECT_EQ(p.calls[0].key, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(p.calls[1].color, (std::vector<int>{0, 1, 0, 1}));  // {0,2} and {1,3}
  // Disjoint groups of different roles share a call; key order is the group's.
  const auto q = plan_nccl_splits(3, roles({{0, {2, 0}}, {0, {1}}, {1, {1}}, {1, {0, 2}}}));
  ASSERT_EQ(q.calls.size(), 2u);
  EXPECT_EQ(q.calls[0].color, (std::vector<int>{0, -1, 0}));
  EXPECT_EQ(q.calls[0].key, (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(q.calls[1].key, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(calls_for(q, roles({{0, {2, 0}}, {1, {0, 2}}})), (std::vector<int>{0, 1}));
  EXPECT_EQ(calls_for(q, roles({{0, {1}}, {1, {1}}})), (std::vector<int>{-1, -1}));
  // The same members under two roles are two groups, in two calls.
  const auto d = plan_nccl_splits(2, roles({{0, {0, 1}}, {1, {0, 1}}}));
  EXPECT_EQ(d.calls.size(), 2u);
  EXPECT_TRUE(plan_nccl_splits(2, roles({{0, {0}}, {0, {1}}})).calls.empty());
}

TEST(NcclSplit, RefusesWhatNcclCannotGive) {
  EXPECT_THROW(plan_nccl_splits(2, roles({{0, {0, 2}}})), st::Error);  // outside the world
  EXPECT_THROW(plan_nccl_splits(2, roles({{0, {1, 1}}})), st::Error);  // twice in one group
  // A role that does not partition the world: ranks handed over different lists.
  EXPECT_THROW(plan_nccl_splits(3, roles({{0, {0, 1, 2}}, {0, {2, 1, 0}}})), st::Error);
  EXPECT_THROW(plan_nccl_splits(3, roles({{0, {0, 1}}})), st::Error);  // rank 2 in none
  EXPECT_THROW(plan_nccl_splits(2, roles({{0, {0, 1}}, {1, {0}}})), st::Error);
  EXPECT_THROW(calls_for(plan_nccl_splits(2, roles({{0, {0, 1}}})), roles({{1, {0, 1}}})),
               st::Error);
}
}  // namespace
