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

namespace {

// The 405B shape at 128K context over 16,384 devices: tp 8, cp 16 (8192
// tokens a rank, chunks of 4096), pp 16 (7,8*14,7 layers), dp 8, 16
// micro-batches, with the recomputation policies given.
std::vector<Candidate> long_context(const st::plan::Cluster& cl,
                                    const std::vector<std::string>& act_ckpt) {
  const Config base = st::load_config_unchecked(
      "", with(k405b, {"parallel.pipeline_layers=7,8*14,7", "model.seq_len=131072"}));
  KnobRanges r = one_layout(base, 16384, 8, 8, 16, 1, 16);
  r.cp = {16};
  r.act_ckpt = act_ckpt;
  return st::plan::plan_space(base, r, cl);
}

const Candidate& by_policy(const std::vector<Candidate>& c, const std::string& act_ckpt) {
  for (const Candidate& x : c)
    if (x.cfg.train.act_ckpt == act_ckpt) return x;
  throw std::runtime_error("no layout with act_ckpt " + act_ckpt);
}

std::string clusters() { return std::string(SCALETRAIN_SOURCE_DIR) + "/configs/clusters/"; }

}  // namespace

// Priced by rates, the long-context layout's attention is what its FLOPs
// take at the rate the cluster file holds for a rank's 8192 tokens (within
// 25%: the stage with the most layers, 8, is the reference; the critical
// stage may hold 7 and the head), and the plan carries the FLOPs it priced,
// which ran between the file's backward and forward rates. The fitted
// profile (fractions of MPT's 2023 runs, a ring block's masked half
// counted) misses the same figure by far more: the test tells them apart.
TEST(PlanSpace, LongContextAttentionAtTheCalibratedRate) {
  const auto cl = st::plan::load_cluster(clusters() + "h100-sxm-80gb.yaml");
  ASSERT_EQ(cl.pricing, "rates");
  double rf = 0, rb = 0;  // the file's causal row at 8192 tokens, head dim 128
  for (const auto& a : cl.rates.attention)
    if (a.block == "causal" && a.head_dim == 128 && a.seq == 8192)
      rf = a.fwd_flops, rb = a.bwd_flops;
  ASSERT_GT(rf, 0);
  // Causal forward FLOPs of one layer's attention on one rank per
  // micro-batch: 4 B (Hq / tp) hd Tg^2 / 2 / cp; selective runs it twice
  // and the backward (2.5 times it) once.
  const double Tg = 131072, f = 4.0 * 1 * (128 / 8) * 128 * Tg * Tg / 2 / 16;
  const double per_layer = 2 * f / rf + 2.5 * f / rb;
  const double expected = 8 * 16 * per_layer;
  const auto c = long_context(cl, {"selective"});
  ASSERT_EQ(c.size(), 1u);
  ASSERT_TRUE(c[0].timed) << c[0].reason;
  const auto& t = c[0].time;
  EXPECT_NEAR(t.attention / expected, 1.0, 0.25) << t.attention << " s against " << expected;
  const double rate = t.attention_flops / t.attention;
  EXPECT_GE(rate, 0.95 * rb);
  EXPECT_LE(rate, rf);
  // The attention FLOPs priced: 7 or 8 layers' worth.
  EXPECT_GE(t.attention_flops, 7 * 16 * 4.5 * f * 0.999);
  EXPECT_LE(t.attention_flops, 8 * 16 * 4.5 * f * 1.001);
  const auto fitted =
      long_context(st::plan::with_profile(cl, st::plan::kPublishedProfile), {"selective"});
  ASSERT_TRUE(fitted[0].timed);
  EXPECT_GT(fitted[0].time.attention / expected, 1.25);
}

// Recomputation the planner and the engine agree on: the planner's
// `recompute` part of selective recomputation (the attention core again,
// lib/model/block.cpp) is the attention time the engine's recorded step
// adds over no recomputation; at 128K context, where memory allows no
// recomputation (141 GB H200) the planner ranks it first, and where it does
// not (80 GB H100) the cheapest policy that fits.
TEST(PlanSpace, LongContextRecomputationAsTheEngineRunsIt) {
  const auto h200 = st::plan::load_cluster(clusters() + "h200-141gb.yaml");
  const auto c = long_context(h200, {"none", "selective", "full"});
  ASSERT_EQ(c.size(), 3u);
  const Candidate &none = by_policy(c, "none"), &sel = by_policy(c, "selective"),
                  &full = by_policy(c, "full");
  for (const Candidate* x : {&none, &sel, &full}) ASSERT_TRUE(x->timed) << x->reason;
  EXPECT_DOUBLE_EQ(none.time.recompute, 0);
  EXPECT_NEAR(sel.time.recompute / (sel.time.attention - none.time.attention), 1.0, 0.03);
  EXPECT_GT(full.time.recompute, sel.time.recompute);
  ASSERT_TRUE(none.feasible) << none.reason;
  EXPECT_EQ(c[0].cfg.train.act_ckpt, "none");
  EXPECT_LT(none.time.step, sel.time.step);
  EXPECT_LT(sel.time.step, full.time.step);

  const auto h100 = st::plan::load_cluster(clusters() + "h100-sxm-80gb.yaml");
  const auto d = long_context(h100, {"none", "selective", "full"});
  EXPECT_FALSE(by_policy(d, "none").feasible);
  EXPECT_NE(by_policy(d, "none").reason.find("memory"), std::string::npos);
  EXPECT_TRUE(d[0].feasible);
  EXPECT_EQ(d[0].cfg.train.act_ckpt, "selective");
}
