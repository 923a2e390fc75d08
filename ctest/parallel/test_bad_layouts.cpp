// Bad parallel layouts fail at start-up (exit 2, before any training) with a
// message that names the knob and says what would be valid. The model is
// configs/models/tiny.yaml: 2 layers, 4 heads, 2 kv heads, seq_len 64.
#include <gtest/gtest.h>

#include "e2e/run_util.hpp"

using namespace st::test;

namespace {
struct Bad {
  const char* name;
  int ranks;
  std::string sets;
  std::vector<std::string> says;  // every one must appear in the message
};

class BadLayouts : public ::testing::TestWithParam<Bad> {};

TEST_P(BadLayouts, FailAtStartupNamingTheKnob) {
  const Bad& b = GetParam();
  const std::string out = fresh_dir(std::string("bad-") + b.name);
  auto r = run_scaletrain(b.ranks, "--config " + src_dir() +
                                       "/configs/models/tiny.yaml --set train.steps=2 " + b.sets +
                                       " --set runtime.cpu_peak_gflops=1 --out " + out + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const auto& s : b.says)
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/run/telemetry/rank_00000.jsonl")) << r.output;
  std::filesystem::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(
    E2E, BadLayouts,
    ::testing::Values(
        Bad{"product",
            2,
            "--set parallel.dp=2 --set parallel.tp=2",
            {"dp*tp*pp*cp", "world size 2", "parallel.dp=1"}},
        Bad{"heads_tp", 1, "--set parallel.tp=3", {"model.n_heads=4", "parallel.tp=3", "multiple"}},
        Bad{"kv_heads_tp", 1, "--set parallel.tp=4", {"model.n_kv_heads=2", "parallel.tp=4"}},
        Bad{"layers_pp_chunks",
            1,
            "--set parallel.pp=2 --set parallel.num_model_chunks=2",
            {"model.n_layers=2", "parallel.pp * parallel.num_model_chunks", "choose n_layers"}},
        Bad{"seq_cp",
            1,
            "--set parallel.cp=3",
            {"model.seq_len=64", "2*parallel.cp", "choose seq_len"}},
        Bad{"sp_without_tp", 1, "--set parallel.sp=true", {"parallel.sp=true", "parallel.tp"}},
        Bad{"zero3_pp",
            1,
            "--set parallel.zero_stage=3 --set parallel.pp=2",
            {"parallel.zero_stage=3", "parallel.pp=2", "valid"}},
        Bad{"zero_stage", 1, "--set parallel.zero_stage=4", {"parallel.zero_stage", "3"}}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });
}  // namespace
