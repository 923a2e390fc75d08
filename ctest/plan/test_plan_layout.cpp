// lib/plan's layout arithmetic against the trainer's own (lib/parallel's
// stage_layers and pipeline_schedule, lib/model's count_params, which link
// MPI and so cannot be linked by the planner): the same answers for every
// shape tried, so a change on one side that the other misses fails here.
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "model/model.hpp"
#include "parallel/mesh.hpp"
#include "parallel/pipeline.hpp"
#include "plan/layout.hpp"

namespace {

TEST(PlanLayout, StageLayersMatchTheTrainer) {
  for (int L : {4, 8, 12, 24})
    for (int pp : {1, 2, 4})
      for (int v : {1, 2, 3})
        for (int s = 0; s < pp; ++s) {
          if (L % (pp * v) != 0) continue;
          EXPECT_EQ(st::plan::stage_layer_ranges(L, pp, v, s), st::stage_layers(L, pp, v, s))
              << "L=" << L << " pp=" << pp << " v=" << v << " stage " << s;
        }
}

TEST(PlanLayout, PipelineOpsMatchTheTrainersSchedule) {
  int checked = 0;
  for (int pp : {1, 2, 3, 4})
    for (int v : {1, 2, 3})
      for (int M : {1, 2, 3, 4, 6, 8, 12})
        for (int s = 0; s < pp; ++s) {
          if (v > 1 && (pp < 2 || M % pp != 0)) continue;
          const auto mine = st::plan::pipeline_ops(pp, v, M, s);
          const auto theirs = st::pipeline_schedule(pp, v, M, s);
          ASSERT_EQ(mine.size(), theirs.size()) << "pp=" << pp << " v=" << v << " M=" << M;
          for (size_t i = 0; i < mine.size(); ++i) {
            EXPECT_EQ(mine[i].forward, theirs[i].forward) << i;
            EXPECT_EQ(mine[i].micro, theirs[i].micro) << i;
            EXPECT_EQ(mine[i].chunk, theirs[i].chunk) << i;
          }
          ++checked;
        }
  EXPECT_GT(checked, 50);
}

TEST(PlanLayout, ParameterCountsMatchTheModel) {
  for (const char* preset : {"tiny", "default", "llama-7b", "llama-70b"}) {
    const st::Config c = st::load_config("", {std::string("model.preset=") + preset});
    EXPECT_EQ(st::plan::model_params(c.model), st::count_params(c.model)) << preset;
    // The stages of any pipeline hold every parameter once (tp = 1).
    for (int pp : {1, 2, 4}) {
      if (c.model.n_layers % pp) continue;
      st::Config p = c;
      p.parallel.pp = pp;
      int64_t sum = 0;
      for (int s = 0; s < pp; ++s) sum += st::plan::stage_shape(p, s).params;
      EXPECT_EQ(sum, st::count_params(c.model)) << preset << " pp=" << pp;
    }
  }
}

TEST(PlanLayout, BucketsCloseAtTheCapAndAtLayersUnderZero3) {
  st::Config c = st::load_config("", {"model.preset=default"});
  c.parallel.dp = 2;
  c.parallel.dp_bucket_mb = 25;
  const auto shape = st::plan::stage_shape(c, 0);
  const auto ps = st::plan::stage_params(c, shape);
  ASSERT_EQ(ps.size(), size_t(1 + 9 * c.model.n_layers + 2));
  double total = 0;
  for (const auto& p : ps) total += p.n;
  EXPECT_EQ(int64_t(total), shape.params);
  const double cap = 25.0 * 1024 * 1024 / 4;
  const auto b = st::plan::grad_buckets(c, ps);
  double sum = 0;
  for (const auto& k : b) {
    sum += k.n;
    EXPECT_LE(k.n, cap);
  }
  EXPECT_EQ(sum, total);
  // Buckets follow backward order: each starts below the previous one, the
  // first holds the head, the last the embedding.
  for (size_t k = 1; k < b.size(); ++k) EXPECT_LT(b[k].first, b[k - 1].first);
  EXPECT_EQ(ps.back().layer, c.model.n_layers);
  EXPECT_EQ(b.back().first, 0);
  c.parallel.zero_stage = 3;
  const auto z3 = st::plan::grad_buckets(c, ps);
  EXPECT_EQ(z3.size(), size_t(c.model.n_layers + 2)) << "one bucket per layer, embedding, head";
}

}  // namespace
