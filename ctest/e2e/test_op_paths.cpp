// No silent fallback, on CPU ranks: every step record's `paths` says which
// implementation ran, call for call (kernels/ops.hpp OpPaths,
// docs/telemetry.md). The tiny model (2 layers) without activation
// checkpointing runs each layer's attention once forward and once backward
// per micro-batch; with cp = 2 the causal attention runs as ring-attention
// blocks instead; GEMMs are named by the precision's CPU library. An
// evaluation between steps is not counted into the next step.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include "run_util.hpp"

using namespace st::test;
using Counts = std::map<std::string, int64_t>;

namespace {
std::vector<nlohmann::json> step_paths(const std::string& run, int rank) {
  char name[64];
  std::snprintf(name, sizeof name, "/telemetry/rank_%05d.jsonl", rank);
  std::ifstream in(run + name);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == "step") out.push_back(j.at("paths"));
  }
  return out;
}

std::string tiny(const std::string& extra, const std::string& out) {
  return "--config " + src_dir() + "/configs/models/tiny.yaml --set train.steps=3" +
         " --set train.act_ckpt=none --set train.grad_accum=2 " + extra + " --out " + out;
}
}  // namespace

TEST(OpPaths, CpuStepRecordsCountWhatRan) {
  const std::string dir = fresh_dir("op_paths");
  auto r = run_scaletrain(1, tiny("--set train.precision=bf16", dir + "/bf16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto steps = step_paths(dir + "/bf16", 0);
  ASSERT_EQ(steps.size(), 3u);
  for (const auto& p : steps) {
    // 2 layers x 2 micro-batches, once each way.
    EXPECT_EQ(p.at("attention_fwd").get<Counts>(), (Counts{{"cpu", 4}})) << p.dump();
    EXPECT_EQ(p.at("attention_bwd").get<Counts>(), (Counts{{"cpu", 4}})) << p.dump();
    const Counts g = p.at("gemm").get<Counts>();
    ASSERT_EQ(g.count("cpu_bf16"), 1u) << p.dump();
    EXPECT_GT(g.at("cpu_bf16"), 0);
    for (const auto& [k, n] : g) EXPECT_TRUE(k == "cpu_bf16" || k == "cpu_fp32") << k;
  }
  EXPECT_EQ(steps[1], steps[2]) << "the same work every step, counted per step";

  // An evaluation after every step runs forward ops between steps: they are
  // not counted into the next step's record (the same records as the same
  // run without evaluation).
  {
    std::ofstream tok(dir + "/tokens.bin", std::ios::binary);
    for (int i = 0; i < 65536; ++i) {
      const uint16_t id = uint16_t((i * 37 + i / 7) % 256);
      tok.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
  }
  const std::string file =
      "--set train.precision=bf16 --set data.source=file --set data.path=" + dir + "/tokens.bin";
  r = run_scaletrain(1, tiny(file, dir + "/file"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_scaletrain(1, tiny(file + " --set train.eval_interval=1 --set data.val_batches=2" +
                                 " --set data.val_path=" + dir + "/tokens.bin",
                             dir + "/eval"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto without = step_paths(dir + "/file", 0), with_eval = step_paths(dir + "/eval", 0);
  ASSERT_EQ(with_eval.size(), 3u);
  EXPECT_EQ(with_eval, without);
  EXPECT_EQ(without, steps) << "the paths depend on the shapes, not the data";

  r = run_scaletrain(2, tiny("--set parallel.cp=2", dir + "/ring"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank)
    for (const auto& p : step_paths(dir + "/ring", rank)) {
      const Counts f = p.at("attention_fwd").get<Counts>();
      EXPECT_EQ(f.count("cpu"), 0u) << p.dump();  // no full causal attention under cp = 2
      ASSERT_EQ(f.count("ring_block"), 1u) << p.dump();
      EXPECT_GE(f.at("ring_block"), 4);  // at least one block per layer and micro-batch
      EXPECT_EQ(p.at("attention_bwd").at("ring_block"), f.at("ring_block")) << p.dump();
      EXPECT_EQ(p.at("gemm").get<Counts>().count("cpu_fp32"), 1u) << p.dump();
    }
  std::filesystem::remove_all(dir);
}
