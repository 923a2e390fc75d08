// scaletrain-plan's conclusions from a ranked layout space (summary.hpp), on
// hand-made candidates: counts by outcome and grouped refusal reasons, the
// top K, the nearest over the limit (at least 3 when nothing fits), the
// campaign (runnable top K, then the first --near nearest), and the
// weak-scaling points (fastest feasible per size, efficiency against the
// smallest size's).
#include <gtest/gtest.h>

#include "planner/summary.hpp"

namespace {
using st::plan::Candidate;

Candidate fits(int devices, double tps) {
  Candidate c;
  c.devices = devices;
  c.feasible = c.timed = true;
  c.time.tokens_per_s = tps;
  c.time.tokens_per_s_device = tps / devices;
  return c;
}
Candidate over(double excess) {
  Candidate c;
  c.devices = 8;
  c.timed = true;
  c.reason = "memory: over by " + std::to_string(excess);
  return c;
}
Candidate invalid(const std::string& why) {
  Candidate c;
  c.devices = 8;
  c.reason = why;
  return c;
}
}  // namespace

TEST(PlanSummary, CountsReasonsTopNearestAndCampaign) {
  std::vector<Candidate> v = {fits(8, 300),
                              fits(8, 200),
                              fits(8, 100),
                              over(1),
                              over(2),
                              over(3),
                              over(4),
                              invalid("divisibility: model.n_heads=32 by parallel.tp=3"),
                              invalid("divisibility: model.n_heads=32 by parallel.tp=5"),
                              invalid("unsupported: parallel.zero_stage=3 with parallel.pp=2")};
  v[1].not_runnable = "not on this device";
  const auto s = st::plan::summarize_plan(v, 2, 1);
  EXPECT_EQ(s.feasible, 3);
  EXPECT_EQ(s.over, 4);
  EXPECT_EQ(s.invalid, 3);
  EXPECT_EQ(s.why.at("memory"), 4);
  EXPECT_EQ(s.why.at("divisibility: model.n_heads"), 2);
  EXPECT_EQ(s.why.at("unsupported: parallel.zero_stage"), 1);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0], &v[0]);
  EXPECT_EQ(s.top[1], &v[1]);
  ASSERT_EQ(s.nearest.size(), 1u);  // --near 1, something fits
  EXPECT_EQ(s.nearest[0], &v[3]);
  // The runnable top (v[1] is not), then the nearest.
  ASSERT_EQ(s.campaign.size(), 2u);
  EXPECT_EQ(s.campaign[0], &v[0]);
  EXPECT_EQ(s.campaign[1], &v[3]);
}

TEST(PlanSummary, NothingFitsShowsAtLeastThreeNearestButCampaignsOnlyNear) {
  std::vector<Candidate> v = {over(1), over(2), over(3), over(4), invalid("divisibility: x y")};
  const auto s = st::plan::summarize_plan(v, 10, 0);
  EXPECT_EQ(s.feasible, 0);
  ASSERT_EQ(s.nearest.size(), 3u);
  EXPECT_EQ(s.nearest[2], &v[2]);
  EXPECT_TRUE(s.campaign.empty());
  EXPECT_EQ(st::plan::summarize_plan(v, 10, 5).nearest.size(), 4u);  // all four that were timed
}

TEST(PlanSummary, WeakScalingPoints) {
  std::vector<Candidate> v = {fits(1, 100), fits(1, 90), fits(4, 360), fits(4, 300), over(1)};
  v[4].devices = 8;
  const auto w = st::plan::weak_points(v, {1, 4, 8});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].best, &v[0]);
  EXPECT_DOUBLE_EQ(w[0].efficiency, 1.0);
  EXPECT_EQ(w[1].best, &v[2]);
  EXPECT_DOUBLE_EQ(w[1].efficiency, 0.9);  // 90 tokens/s/device against 100
  EXPECT_EQ(w[2].best, nullptr);
}

// --top ranks within each device count: the candidates are ranked across all
// counts (the 64-device layouts' tokens/s are higher), yet each count keeps
// its own top K, smallest count first, and its own nearest over the limit.
TEST(PlanSummary, TopRanksWithinEachDeviceCount) {
  std::vector<Candidate> v = {fits(64, 6400), fits(64, 6000), fits(64, 5000), fits(8, 900),
                              fits(8, 800),   fits(8, 700),   over(1),        over(2)};
  v[6].devices = 8;
  v[7].devices = 64;
  const auto s = st::plan::summarize_plan(v, 2, 1);
  ASSERT_EQ(s.top.size(), 4u);
  EXPECT_EQ(s.top[0], &v[3]);
  EXPECT_EQ(s.top[1], &v[4]);
  EXPECT_EQ(s.top[2], &v[0]);
  EXPECT_EQ(s.top[3], &v[1]);
  ASSERT_EQ(s.nearest.size(), 2u);  // one per count
  EXPECT_EQ(s.nearest[0], &v[6]);
  EXPECT_EQ(s.nearest[1], &v[7]);
  EXPECT_EQ(s.campaign.size(), 6u);
}
