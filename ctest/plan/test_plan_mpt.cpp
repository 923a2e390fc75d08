// The MPT fit/holdout validation (analysis/reference/mpt_benchmarks.csv):
// which rows fit and which are held out, at most three constants per GPU
// type, the held-out error under 10% for single-node and multi-node rows,
// and the fitting machinery itself on rows the model generated.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "plan/time_model.hpp"
#include "planner/calibrate.hpp"
#include "planner/mpt_fit.hpp"

namespace {
std::string src() {
  const char* s = std::getenv("SCALETRAIN_SOURCE_DIR");
  return s ? s : ".";
}
std::map<std::string, std::string> clusters() {
  const std::string d = src() + "/configs/clusters/";
  return {{"h100_80gb", d + "h100-sxm-80gb.yaml"},
          {"a100_80gb", d + "a100-sxm-80gb.yaml"},
          {"a100_40gb", d + "a100-sxm-40gb.yaml"}};
}
std::vector<st::plan::MptRow> rows() {
  return st::plan::read_mpt_rows(src() + "/analysis/reference/mpt_benchmarks.csv",
                                 src() + "/analysis/reference/mpt_models.csv");
}

TEST(PlanMpt, EvenRowsFitOddRowsHeldOut) {
  const auto r = rows();
  ASSERT_EQ(r.size(), 216u);
  const auto g = st::plan::mpt_fit(r, clusters());
  ASSERT_EQ(g.size(), 4u);  // h100 bf16, h100 fp8, a100 80 GB, a100 40 GB
  size_t total = 0;
  for (const auto& G : g) {
    total += G.fit.size() + G.holdout.size();
    EXPECT_TRUE(G.fit.size() == G.holdout.size() || G.fit.size() == G.holdout.size() + 1) << G.name;
    // Rows of the type in file order alternate: fit, held out, fit, ...
    for (size_t i = 0; i < G.holdout.size(); ++i) EXPECT_LT(G.fit[i]->line, G.holdout[i]->line);
    for (double c : G.c) EXPECT_TRUE(std::isfinite(c) && c > 0) << G.name;
  }
  EXPECT_EQ(total, 216u);
  // The held-out error, all types together, per scale (the validation target).
  double s1 = 0, s0 = 0;
  int n1 = 0, n0 = 0;
  for (const auto& G : g)
    for (const auto* row : G.holdout) {
      const double e = std::abs(G.pred.at(row) / row->tok_s_gpu - 1);
      if (row->gpus <= 8)
        s1 += e, ++n1;
      else
        s0 += e, ++n0;
    }
  ASSERT_GT(n1, 50);
  ASSERT_GT(n0, 20);
  EXPECT_LT(s1 / n1, 0.10) << "single-node held-out MAPE";
  EXPECT_LT(s0 / n0, 0.10) << "multi-node held-out MAPE";
}

TEST(PlanMpt, FitRecoversRowsTheModelItselfProduced) {
  // Replace the published throughput by the model's own prediction at known
  // constants: the fit must find constants that reproduce it (MAPE ~ 0).
  auto r = rows();
  std::vector<st::plan::MptRow> a100;
  auto cl = st::plan::load_cluster(clusters()["a100_40gb"]);
  cl.eff.gemm = 0.45, cl.eff.attention = 0.25, cl.eff.network = 0.3;
  for (auto& row : r)
    if (row.gpu == "a100_40gb") {
      row.tok_s_gpu = st::plan::predict_step(st::plan::mpt_config(row), cl).tokens_per_s_device;
      a100.push_back(row);
    }
  const auto g = st::plan::mpt_fit(a100, clusters());
  ASSERT_EQ(g.size(), 1u);
  EXPECT_LT(g[0].mape(g[0].fit, -1), 0.01);
  EXPECT_LT(g[0].mape(g[0].holdout, -1), 0.01);
  EXPECT_NEAR(g[0].c[0], 0.45, 0.05);
}

TEST(PlanMpt, MinimiserFindsAKnownMinimum) {
  const auto x = st::plan::minimise_positive(
      [](const std::vector<double>& v) {
        return std::pow(v[0] - 0.3, 2) + std::pow(v[1] - 2.0, 2) + std::pow(v[2] - 0.05, 2);
      },
      {1, 1, 1}, 400);
  EXPECT_NEAR(x[0], 0.3, 1e-3);
  EXPECT_NEAR(x[1], 2.0, 1e-3);
  EXPECT_NEAR(x[2], 0.05, 1e-3);
}

TEST(PlanMpt, BadTablesAreRefusedWithFileAndLine) {
  try {
    st::plan::read_mpt_rows(src() + "/analysis/reference/mpt_models.csv",
                            src() + "/analysis/reference/mpt_models.csv");
    FAIL() << "expected a UsageError";
  } catch (const st::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("missing column"), std::string::npos) << e.what();
  }
}
}  // namespace

namespace {
TEST(PlanCalibrate, AlphaBetaFitRecoversLatencyAndBandwidth) {
  // t = 12 us + bytes / 3 GB/s at calibrate's sizes, with +-2% noise.
  std::vector<std::pair<double, double>> pts;
  const double sizes[] = {4096, 65536, 1 << 20, 4 << 20, 16 << 20};
  for (int i = 0; i < 5; ++i) {
    const double t = 12e-6 + sizes[i] / 3e9;
    pts.push_back({sizes[i], t * (i % 2 ? 1.02 : 0.98)});
  }
  const st::plan::Link l = st::plan::fit_alpha_beta(pts);
  EXPECT_NEAR(l.latency, 12e-6, 1.5e-6);
  EXPECT_NEAR(l.bandwidth, 3e9, 0.1e9);
}
}  // namespace
