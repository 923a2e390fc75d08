// The context-parallel sequence split the planner's attention price relies
// on: Op::flops() gives every cp rank 1/cp of the causal work, which holds
// only if the model's own split (st::cp_positions, the zig-zag of chunks r
// and 2cp-1-r) gives each rank the same number of causal (query, key) pairs.
// Counted here from the positions the model hands each rank, not from the
// chunk formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace {

// Causal (q, k) pairs the queries at `pos` attend to: key positions 0..q.
double causal_pairs(const std::vector<int32_t>& pos) {
  double n = 0;
  for (int32_t q : pos) n += double(q) + 1;
  return n;
}

// max / min of the ranks' pair counts, less one.
double imbalance(const std::vector<double>& per_rank) {
  const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
  return *hi / *lo - 1;
}

TEST(CpSplit, EqualCausalWorkPerRank) {
  for (int cp : {2, 4, 8, 16}) {
    for (int64_t Tg : {int64_t(2048), int64_t(8192), int64_t(131072)}) {
      std::vector<double> pairs;
      std::vector<int> seen(size_t(Tg), 0);
      for (int r = 0; r < cp; ++r) {
        const auto pos = st::cp_positions(r, cp, Tg);
        ASSERT_EQ(int64_t(pos.size()), Tg / cp) << "cp " << cp << " rank " << r;
        for (int32_t p : pos) {
          ASSERT_GE(p, 0);
          ASSERT_LT(p, Tg);
          ++seen[size_t(p)];
        }
        pairs.push_back(causal_pairs(pos));
      }
      // Every position held by exactly one rank: the split is a partition.
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }))
          << "cp " << cp << " seq " << Tg;
      const double total = Tg * (double(Tg) + 1) / 2;
      double sum = 0;
      for (double p : pairs) sum += p;
      EXPECT_DOUBLE_EQ(sum, total) << "cp " << cp << " seq " << Tg;
      EXPECT_LT(imbalance(pairs), 0.02) << "cp " << cp << " seq " << Tg;
    }
  }
}

// The measure can fail: a contiguous split (rank r holds tokens
// [r Tg/cp, (r+1) Tg/cp)) gives the last rank 2cp-1 times the first's work.
TEST(CpSplit, ContiguousSplitIsUnbalanced) {
  const int cp = 4;
  const int64_t Tg = 8192;
  std::vector<double> pairs;
  for (int r = 0; r < cp; ++r) {
    std::vector<int32_t> pos;
    for (int64_t t = r * Tg / cp; t < (r + 1) * Tg / cp; ++t) pos.push_back(int32_t(t));
    pairs.push_back(causal_pairs(pos));
  }
  EXPECT_GT(imbalance(pairs), 0.02);
  EXPECT_NEAR(pairs.back() / pairs.front(), 2.0 * cp - 1, 0.01);
}

}  // namespace
