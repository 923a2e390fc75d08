// --dry-run needs no GPU and no training: it prints the layout and the
// per-rank memory estimate, with the GPU's bf16 storage accounted for
// (fp32 master + bf16 copy of the weights, bf16 activations) when
// runtime.device=cuda, so a GPU job can be sized on a laptop.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "run_util.hpp"

using namespace st::test;

namespace {
// The memory row of rank 0: params, grads, optim, activ, total in GiB.
std::vector<double> rank0_memory(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  const std::regex row(R"(^\s+0\s+0\s+0\s+0\s+0\s+\S+\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB)");
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, row))
      return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])};
  return {};
}
}  // namespace

TEST(DryRun, GpuEstimateCountsBf16Storage) {
  const std::string base = "--dry-run --config " + src_dir() +
                           "/configs/default.yaml --set model.preset=llama-7b"
                           " --set model.seq_len=4096 --set train.micro_batch=1"
                           " --set train.act_ckpt=full";
  auto cpu = run_scaletrain(1, base);
  auto gpu = run_scaletrain(1, base + " --set runtime.device=cuda --set train.precision=bf16");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  auto c = rank0_memory(cpu.output), g = rank0_memory(gpu.output);
  ASSERT_EQ(c.size(), 5u) << cpu.output;
  ASSERT_EQ(g.size(), 5u) << gpu.output;
  // 7B: 6.74e9 params; weights 4 B (CPU) vs 6 B (GPU), grads 4 B, moments 8 B.
  EXPECT_NEAR(c[0], 6738415616.0 * 4 / (1 << 30), 0.1);
  EXPECT_NEAR(g[0], 6738415616.0 * 6 / (1 << 30), 0.1);
  EXPECT_NEAR(g[1], c[1], 0.05);
  EXPECT_NEAR(g[2], c[2], 0.05);
  EXPECT_NEAR(g[3], c[3] / 2, 0.1);  // bf16 activations (printed to 0.1 GiB)
}
