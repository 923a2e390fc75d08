// The memory model against the real trainer: small runs of a 4-layer tiny
// model at 1, 2 and 4 ranks, every layout family and checkpointing mode;
// each rank's largest mem_peak_bytes in telemetry must be within 10% of the
// model's prediction for its pipeline stage (the part the trainer's
// allocator tracks). The config the prediction uses is read back from the
// run's run.json (scaletrain-plan compare's reader).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/run_util.hpp"
#include "plan/memory.hpp"
#include "planner/compare.hpp"

namespace fs = std::filesystem;
using st::test::run_scaletrain;

namespace {
struct Case {
  const char* name;
  int ranks;
  const char* sets;
};

// Largest mem_peak_bytes of every rank file of a run.
std::vector<double> measured_peaks(const std::string& dir, int ranks) {
  std::vector<double> out;
  for (int r = 0; r < ranks; ++r) {
    char f[64];
    std::snprintf(f, sizeof f, "telemetry/rank_%05d.jsonl", r);
    std::ifstream in(fs::path(dir) / f);
    double peak = 0;
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("type", "") == "step")
        peak = std::max(peak, j.value("mem_peak_bytes", 0.0));
    }
    out.push_back(peak);
  }
  return out;
}

TEST(PlanMemoryE2E, PredictionWithinTenPercentOfMeasuredPeaks) {
  const Case cases[] = {
      {"single", 1, ""},
      {"single_selective", 1, "--set train.act_ckpt=selective --set train.grad_accum=2"},
      {"single_full", 1, "--set train.act_ckpt=full"},
      {"dp2", 2, ""},
      {"dp2_z1", 2, "--set parallel.zero_stage=1"},
      {"dp2_z2", 2, "--set parallel.zero_stage=2"},
      {"dp2_z3", 2, "--set parallel.zero_stage=3"},
      {"tp2", 2, "--set parallel.tp=2"},
      {"tp2_sp", 2, "--set parallel.tp=2 --set parallel.sp=true"},
      {"pp2", 2, "--set parallel.pp=2 --set train.grad_accum=4 --set train.micro_batch=1"},
      {"pp2_v2", 2,
       "--set parallel.pp=2 --set parallel.num_model_chunks=2 --set train.grad_accum=4 "
       "--set train.micro_batch=1"},
      {"pp2_full", 2, "--set parallel.pp=2 --set train.grad_accum=2 --set train.act_ckpt=full"},
      {"cp2", 2, "--set parallel.cp=2"},
      {"dp4_z2", 4, "--set parallel.zero_stage=2"},
      {"dp2_tp2_z3", 4, "--set parallel.tp=2 --set parallel.zero_stage=3"},
      {"pp4", 4, "--set parallel.pp=4 --set train.grad_accum=4 --set train.micro_batch=1"},
      {"tp4_sp", 4, "--set parallel.tp=4 --set parallel.sp=true"},
      {"cp2_tp2", 4, "--set parallel.cp=2 --set parallel.tp=2"},
      {"dp2_pp2_v2", 4,
       "--set parallel.pp=2 --set parallel.num_model_chunks=2 --set train.grad_accum=2 "
       "--set train.micro_batch=1"},
  };
  const std::string base = st::test::fresh_dir("plan-memory");
  int checked = 0;
  for (const Case& c : cases) {
    const std::string out = base + "/" + c.name;
    const std::string args = "--config " + st::test::src_dir() +
                             "/configs/models/tiny.yaml --set model.n_layers=4"
                             " --set model.n_kv_heads=4 --set train.steps=3"
                             " --set parallel.dp_bucket_mb=0.05 --set runtime.threads=1"
                             " --set runtime.cpu_peak_gflops=1 " +
                             std::string(c.sets) + " --out " + out;
    const auto r = run_scaletrain(c.ranks, args);
    ASSERT_EQ(r.exit_code, 0) << c.name << ":\n" << r.output;
    const st::Config cfg = st::plan::config_from_run_json(out);
    const auto peaks = measured_peaks(out, c.ranks);
    const int per_stage = c.ranks / cfg.parallel.pp;
    for (int k = 0; k < c.ranks; ++k) {
      const double pred = st::plan::estimate_memory(cfg, k / per_stage).peak.total();
      ASSERT_GT(peaks[size_t(k)], 0) << c.name << " rank " << k;
      EXPECT_NEAR(pred / peaks[size_t(k)], 1.0, 0.10)
          << c.name << " rank " << k << ": predicted " << pred << " measured " << peaks[size_t(k)];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 47);
  fs::remove_all(base);
}
}  // namespace
