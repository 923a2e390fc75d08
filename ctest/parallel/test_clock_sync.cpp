// The clock sync (comm/clock_sync.hpp) on real MPI ranks of one host, where
// the true offset of every rank to rank 0 is 0: every measured offset must
// lie within its stated bound; with one rank per "host" the leaders' binomial
// tree runs (depth ceil(log2 n)) and a rank's bound includes its parent's;
// with two ranks per "host" the second takes its leader's figures; with the
// real host split nobody pings.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/clock_sync.hpp"

using namespace st;

namespace {

// Every rank's {offset, error, rtt}, on every rank.
std::vector<double> gather_all(MpiCommunicator& world, const ClockOffset& c) {
  std::vector<double> all(size_t(world.size()) * 3, 0.0);
  all[size_t(world.rank()) * 3 + 0] = c.offset_s;
  all[size_t(world.rank()) * 3 + 1] = c.error_s;
  all[size_t(world.rank()) * 3 + 2] = c.rtt_s;
  world.all_reduce_sum(all.data(), int64_t(all.size()));
  return all;
}

TEST(ClockSync, EveryRankItsOwnHostTreeWithinBound) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  auto node = world.split(world.rank(), 0, "node");  // one "host" per rank
  for (int rep = 0; rep < 2; ++rep) {
    const ClockOffset c = measure_clock_offset(world, *node);
    const auto all = gather_all(world, c);
    for (int r = 0; r < world.size(); ++r) {
      const double off = all[size_t(r) * 3], err = all[size_t(r) * 3 + 1],
                   rtt = all[size_t(r) * 3 + 2];
      if (r == 0) {
        EXPECT_EQ(off, 0.0);
        EXPECT_EQ(err, 0.0);
        continue;
      }
      EXPECT_GT(rtt, 0.0) << "rank " << r;
      EXPECT_GE(err, 0.5 * rtt) << "rank " << r;
      EXPECT_LE(std::abs(off), err + 1e-6) << "rank " << r;
      // Its parent in the tree is r minus its highest power of two: the
      // bound is this hop's plus the parent's.
      int k = 1;
      while (2 * k <= r) k *= 2;
      const int parent = r - k;
      EXPECT_GE(err + 1e-12, all[size_t(parent) * 3 + 1] + 0.5 * rtt) << "rank " << r;
    }
  }
}

TEST(ClockSync, HostMembersTakeTheirLeadersFigures) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  auto node = world.split(world.rank() / 2, world.rank(), "node");  // two ranks per "host"
  const ClockOffset c = measure_clock_offset(world, *node);
  const auto all = gather_all(world, c);
  for (int r = 1; r < world.size(); r += 2)
    for (int f = 0; f < 3; ++f)
      EXPECT_EQ(all[size_t(r) * 3 + size_t(f)], all[size_t(r - 1) * 3 + size_t(f)])
          << "rank " << r << " field " << f;
  for (int r = 2; r < world.size(); r += 2)
    EXPECT_LE(std::abs(all[size_t(r) * 3]), all[size_t(r) * 3 + 1] + 1e-6) << "rank " << r;
}

TEST(ClockSync, OneRealHostNeedsNoPing) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  auto node = world.split_host("node");
  ASSERT_EQ(node->size(), world.size()) << "this test runs its ranks on one host";
  const ClockOffset c = measure_clock_offset(world, *node);
  EXPECT_EQ(c.offset_s, 0.0);
  EXPECT_EQ(c.error_s, 0.0);
  EXPECT_EQ(c.rtt_s, 0.0);
}

}  // namespace

namespace {

// Who talks to whom, from the recording (issue 56): with one "host" per
// rank the sync takes ceil(log2 n) rounds; rank 0 answers one rank a round
// (ceil(log2 n) partners, not n - 1 in turn); every other rank asks exactly
// once, its parent r minus its highest power of two, in round floor(log2 r),
// and answers at most one rank in each later round.
TEST(ClockSync, RecordingShowsLog2RoundsNotRankZeroWithEachInTurn) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  auto node = world.split(world.rank(), 0, "node");
  std::vector<ClockHop> hops;
  measure_clock_offset(world, *node, 2, &hops);
  const int n = world.size(), r = world.rank();
  int depth = 0;
  while ((1 << depth) < n) ++depth;
  // Rounds across all ranks: the highest level any rank took part in, + 1.
  double rounds = 0;
  for (const auto& h : hops) rounds = std::max(rounds, double(h.level + 1));
  world.all_reduce_max(&rounds, 1);
  EXPECT_EQ(int(rounds), depth) << n << " ranks";
  int asked = 0, answered = 0;
  std::vector<int> per_level(size_t(depth), 0);
  for (const auto& h : hops) {
    ASSERT_LT(h.level, depth);
    ++per_level[size_t(h.level)];
    if (h.parent) {
      ++answered;
      EXPECT_EQ(h.peer, r + (1 << h.level)) << "rank " << r;
    } else {
      ++asked;
      int k = 1, level = 0;
      while (2 * k <= r) k *= 2, ++level;
      EXPECT_EQ(h.peer, r - k) << "rank " << r;
      EXPECT_EQ(h.level, level) << "rank " << r;
    }
  }
  for (int c : per_level) EXPECT_LE(c, 1) << "rank " << r << ": one hop a round at most";
  EXPECT_EQ(asked, r == 0 ? 0 : 1) << "rank " << r;
  if (r == 0) {
    EXPECT_EQ(answered, depth) << "rank 0's partners: ceil(log2 n), not n - 1";
  }
}

}  // namespace
