// The layout space scaletrain-plan searches (lib/plan/space.hpp): the
// pipeline splits it tries (the even one and the ends split large runs use,
// the first and last chunk one layer fewer for the embedding and the head),
// each layout validated once after every knob applied, and one layout of a
// 16,384-device 405B-shape job sized and timed. Expected splits are written
// out here, not read back from the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "config/layout_tools.hpp"
#include "core/error.hpp"
#include "plan/cluster.hpp"
#include "plan/space.hpp"
#include "scaletrain/build_config.hpp"

namespace {
using st::Config;
using st::plan::Candidate;
using st::plan::KnobRanges;

const std::vector<std::string> k405b = {"model.n_layers=126",     "model.d_model=16384",
                                        "model.n_heads=128",      "model.n_kv_heads=8",
                                        "model.ffn_hidden=53248", "model.vocab_size=128256",
                                        "model.seq_len=8192",     "data.source=synthetic"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

KnobRanges one_layout(const Config& base, int devices, int dp, int tp, int pp, int v, int ga) {
  KnobRanges r = st::plan::default_ranges(base, {devices});
  r.dp = {dp}, r.tp = {tp}, r.pp = {pp}, r.cp = {1};
  r.sp = {tp > 1 ? 1 : 0}, r.zero_stage = {1}, r.num_model_chunks = {v};
  r.micro_batch = {1}, r.grad_accum = {ga}, r.act_ckpt = {"full"};
  return r;
}
}  // namespace

TEST(PlanSpace, EndsSplitCountsEmbeddingAndHeadAsALayerEach) {
  // 126 + 2 = 128 units over 16 chunks: 8 each, less one at both ends.
  EXPECT_EQ(st::pipeline_split_ends(126, 16),
            (std::vector<int>{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
  EXPECT_EQ(st::pipeline_layers_spec(st::pipeline_split_ends(126, 32)), "3,4*30,3");
  // 32 + 2 = 34 over 4: 8,9,9,8 -> 7,9,9,7 (the extra units on the middle).
  EXPECT_EQ(st::pipeline_split_ends(32, 4), (std::vector<int>{7, 9, 9, 7}));
  EXPECT_EQ(st::pipeline_split_ends(2, 2), (std::vector<int>{1, 1}));
  EXPECT_TRUE(st::pipeline_split_ends(2, 4).empty());  // a chunk would hold no layer
  EXPECT_EQ(st::pipeline_layers_spec({7, 8, 8, 8, 7}), "7,8*3,7");
}

TEST(PlanSpace, SearchTriesTheEvenAndTheEndsSplit) {
  // 32 layers over pp 4: both splits valid, both tried, each named.
  const Config base =
      st::load_config_unchecked("", {"model.n_layers=32", "model.d_model=256", "model.n_heads=4",
                                     "model.n_kv_heads=2", "data.source=synthetic"});
  KnobRanges r = one_layout(base, 8, 2, 1, 4, 1, 4);
  const auto c = st::plan::enumerate_layouts(base, r, "cpu");
  std::map<std::string, std::string> seen;  // split -> chunk layers
  for (const Candidate& x : c) {
    EXPECT_EQ(x.reason, "") << x.name();
    seen[x.split] = x.chunk_layers();
  }
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(seen["even"], "8*4");
  EXPECT_EQ(seen["ends"], "7,9,9,7");
  EXPECT_NE(c[0].name(), c[1].name());
  // 126 layers over pp 16: the even split is refused (naming the key that
  // would fix it), the ends split is the one that runs.
  const Config big = st::load_config_unchecked("", k405b);
  const auto d =
      st::plan::enumerate_layouts(big, one_layout(big, 16384, 128, 8, 16, 1, 16), "cuda");
  ASSERT_EQ(d.size(), 2u);
  for (const Candidate& x : d) {
    if (x.split == "even") {
      EXPECT_NE(x.reason.find("parallel.pipeline_layers=7,8*14,7"), std::string::npos) << x.reason;
    } else {
      EXPECT_EQ(x.split, "ends");
      EXPECT_EQ(x.reason, "");
      EXPECT_EQ(x.cfg.parallel.pipeline_layers, "7,8*14,7");
    }
  }
  // With the split set in the config, that split alone ("config").
  const Config set =
      st::load_config_unchecked("", with(k405b, {"parallel.pipeline_layers=7,8*14,7"}));
  const auto e =
      st::plan::enumerate_layouts(set, one_layout(set, 16384, 128, 8, 16, 1, 16), "cuda");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].split, "config");
  EXPECT_EQ(e[0].reason, "");
}

// The knobs apply first, the rules run once: a base whose own grad_accum (1)
// the interleaved pipeline refuses is valid with the knob's 32.
TEST(PlanSpace, KnobsApplyBeforeTheRules) {
  const auto sets = with(k405b, {"parallel.num_model_chunks=2", "parallel.pipeline_layers=3,4*30,3",
                                 "parallel.pp=16", "parallel.tp=8"});
  EXPECT_THROW(st::load_config("", sets), st::UsageError);  // what the trainer would refuse
  const Config base = st::load_config_unchecked("", sets);
  const auto c =
      st::plan::enumerate_layouts(base, one_layout(base, 16384, 128, 8, 16, 2, 32), "cuda");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].reason, "");
  EXPECT_EQ(c[0].cfg.train.grad_accum, 32);
  EXPECT_EQ(c[0].chunk_layers(), "3,4*30,3");
  // Still refused where the knobs cannot make it valid, naming the key.
  const auto d =
      st::plan::enumerate_layouts(base, one_layout(base, 8192, 64, 8, 16, 2, 24), "cuda");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].reason.find("train.grad_accum"), std::string::npos) << d[0].reason;
}

// One 16,384-device layout of the 405B shape is sized and timed (what a
// plan at that scale does; the time it takes is docs/planner.md's figure).
TEST(PlanSpace, PlansA16kDeviceLayout) {
  const Config base =
      st::load_config_unchecked("", with(k405b, {"parallel.pipeline_layers=7,8*14,7"}));
  const auto cl = st::plan::load_cluster(std::string(SCALETRAIN_SOURCE_DIR) +
                                         "/configs/clusters/h100-sxm-80gb.yaml");
  const auto c = st::plan::plan_space(base, one_layout(base, 16384, 128, 8, 16, 1, 16), cl);
  ASSERT_EQ(c.size(), 1u);
  ASSERT_TRUE(c[0].timed) << c[0].reason;
  EXPECT_EQ(c[0].time.devices, 16384);
  EXPECT_GT(c[0].time.step, 0);
  EXPECT_GT(c[0].time.mfu, 0);
  EXPECT_LT(c[0].time.mfu, 1);
}
