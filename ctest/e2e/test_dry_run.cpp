// --dry-run needs no GPU and no training: it prints the layout and the
// per-rank memory estimate, with bf16 storage accounted for (fp32 master +
// bf16 copy of the weights, bf16 activations) under train.precision=bf16, so
// a GPU job can be sized on a laptop; an uneven pipeline split sizes each
// stage by its own layers. With the CUDA backend built, a dry run
// on runtime.device=cuda loads it (no GPU needed) and every layout the CPU
// runs is accepted. `--dry-run --world N` plans N ranks from one launched
// rank and prints what a launch of N ranks prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

#include "run_util.hpp"

using namespace st::test;

namespace {
// The memory row of rank 0: params, grads, optim, activ, total in GiB.
std::vector<double> rank0_memory(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  const std::regex row(
      R"(^\s+0\s+0\s+0\s+0\s+0\s+\S+\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB)");
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, row))
      return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])};
  return {};
}
}  // namespace

TEST(DryRun, Bf16EstimateCountsBf16Storage) {
  const std::string base = "--dry-run --config " + src_dir() +
                           "/configs/default.yaml --set model.preset=llama-7b"
                           " --set model.seq_len=4096 --set train.micro_batch=1"
                           " --set train.act_ckpt=full";
  auto cpu = run_scaletrain(1, base);
  auto gpu = run_scaletrain(1, base + " --set train.precision=bf16");
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

// optim.state_dtype=bf16: the bf16 compute weights are the masters (2 B a
// parameter, no fp32 copy), the moments bf16 (4 B), gradients fp32 (4 B);
// the activations are those of the fp32-state run.
TEST(DryRun, Bf16StateCountsTenBytesAParameter) {
  const std::string base = "--dry-run --config " + src_dir() +
                           "/configs/models/llama-8b.yaml"
                           " --set model.seq_len=4096 --set train.micro_batch=1"
                           " --set train.act_ckpt=full --set train.precision=bf16";
  auto f = run_scaletrain(1, base);
  auto b = run_scaletrain(1, base + " --set optim.state_dtype=bf16");
  ASSERT_EQ(f.exit_code, 0) << f.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto x = rank0_memory(f.output), y = rank0_memory(b.output);
  ASSERT_EQ(x.size(), 5u) << f.output;
  ASSERT_EQ(y.size(), 5u) << b.output;
  const double n = 8030261248.0, gib = double(1 << 30);
  EXPECT_NEAR(x[0], n * 6 / gib, 0.1);
  EXPECT_NEAR(x[2], n * 8 / gib, 0.1);
  EXPECT_NEAR(y[0], n * 2 / gib, 0.1);
  EXPECT_NEAR(y[1], n * 4 / gib, 0.1);
  EXPECT_NEAR(y[2], n * 4 / gib, 0.1);
  EXPECT_NEAR(y[3], x[3], 0.15);
}

// runtime.head_chunk_mb sizes the LM head's logits chunks: at a 128K
// vocabulary a 1 GiB budget holds 4,186 bf16 rows where the default rule
// holds 64 (16 MB), so the dry run's activation peak is at least the chunk.
TEST(DryRun, HeadChunkBudgetShowsInTheActivations) {
  const std::string base = "--dry-run --config " + src_dir() +
                           "/configs/models/llama-1b.yaml"
                           " --set model.seq_len=4096 --set train.micro_batch=2"
                           " --set train.act_ckpt=full --set train.precision=bf16";
  auto d = run_scaletrain(1, base);
  auto h = run_scaletrain(1, base + " --set runtime.head_chunk_mb=1024");
  ASSERT_EQ(d.exit_code, 0) << d.output;
  ASSERT_EQ(h.exit_code, 0) << h.output;
  auto x = rank0_memory(d.output), y = rank0_memory(h.output);
  ASSERT_EQ(x.size(), 5u) << d.output;
  ASSERT_EQ(y.size(), 5u) << h.output;
  // The 1 GiB chunk is the peak now (the default's peak was elsewhere).
  EXPECT_GE(y[3], 1.0) << "activations " << x[3] << " -> " << y[3] << " GiB";
  EXPECT_GT(y[3], x[3] + 0.3) << "activations " << x[3] << " -> " << y[3] << " GiB";
  EXPECT_LT(y[3], x[3] + 1.2) << "activations " << x[3] << " -> " << y[3] << " GiB";
}

// The Hugging Face export's time beside its size (issue 56): llama-7b's
// 6,738,415,616 parameters, 16 bytes each read, 13.48 / 26.95 GB written,
// CPU 31 / 41 ns a parameter, storage at 1 GB/s.
TEST(DryRun, PrintsTheHuggingFaceExportsTime) {
  auto r = run_scaletrain(
      1, "--dry-run --config " + src_dir() + "/configs/default.yaml --set model.preset=llama-7b");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(R"(HF export time +bf16 ([0-9.e+]+) s, fp32 ([0-9.e+]+) s at 1 GB/s)")))
      << r.output;
  const double n = 6738415616.0;
  EXPECT_NEAR(std::stod(m[1]), n * 31e-9 + (16 * n + 13476889588.0) / 1e9, 1.0);
  EXPECT_NEAR(std::stod(m[2]), n * 41e-9 + (16 * n + 26953720635.0) / 1e9, 1.0);
}

TEST(DryRun, UnevenPipelineSplitSizesEachStage) {
  // tiny with 4 layers split 3+1 over pp 2: stage 0 holds the embedding
  // (256 x 64) and 3 blocks of 36,992 parameters, stage 1 one block, the
  // final norm (64) and the head (256 x 64); fp32 weights, 4 B each.
  auto r = run_scaletrain(2, "--dry-run --config " + src_dir() +
                                 "/configs/models/tiny.yaml --set model.n_layers=4"
                                 " --set parallel.pp=2 --set parallel.pipeline_layers=3,1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double s0 = 4.0 * (256 * 64 + 3 * 36992), s1 = 4.0 * (36992 + 64 + 256 * 64);
  char want0[64], want1[64];
  std::snprintf(want0, sizeof want0, "0-2 +%.1f KiB", s0 / 1024);
  std::snprintf(want1, sizeof want1, "3-3 +%.1f KiB", s1 / 1024);
  EXPECT_TRUE(std::regex_search(r.output, std::regex(want0))) << want0 << "\n" << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(want1))) << want1 << "\n" << r.output;
}

// The layouts GPU campaigns need, under the CUDA backend: accepted, each
// rank's layout and memory printed, no GPU touched.
TEST(DryRun, EveryLayoutFamilyIsAcceptedOnCuda) {
  const std::string lib = env_or("SCALETRAIN_BUILD_DIR", ".") + "/lib/libscaletrain_cuda.so";
  if (!std::filesystem::exists(lib))
    GTEST_SKIP() << "built without the CUDA backend (" << lib << ")";
  const std::string base = "--dry-run --config " + src_dir() +
                           "/configs/models/llama-7b.yaml --set runtime.device=cuda"
                           " --set train.precision=bf16";
  for (const char* layout :
       {" --set parallel.zero_stage=3 --set parallel.tp=2 --set parallel.sp=true",
        " --set parallel.pp=2 --set parallel.num_model_chunks=2"
        " --set parallel.zero_stage=1 --set train.grad_accum=2",
        " --set parallel.cp=2 --set parallel.tp=2"}) {
    auto r = run_scaletrain(8, base + layout);
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.output;
    for (int rank = 0; rank < 8; ++rank)
      EXPECT_TRUE(std::regex_search(r.output, std::regex("\\n\\s+" + std::to_string(rank) +
                                                         "\\s+\\d+\\s+\\d+\\s+\\d+\\s+\\d+\\s+")))
          << "no memory row for rank " << rank << ":\n"
          << r.output;
  }
}

// --world N from one rank: the same layout, mesh and memory table as a launch
// of N ranks; --world without --dry-run, or below 1, is refused.
TEST(DryRun, WorldPlansALayoutWithoutLaunchingIt) {
  const std::string base = "--dry-run --config " + src_dir() +
                           "/configs/models/tiny.yaml --set parallel.tp=2 --set parallel.pp=2";
  auto one = run_scaletrain(1, base + " --world 8");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("world 8 = pp 2 x dp 2 x cp 1 x tp 2"), std::string::npos)
      << one.output;
  for (int rank = 0; rank < 8; ++rank)
    EXPECT_TRUE(std::regex_search(one.output, std::regex("\\n\\s+" + std::to_string(rank) +
                                                         "\\s+\\d+\\s+\\d+\\s+\\d+\\s+\\d+\\s+")))
        << "no memory row for rank " << rank << ":\n"
        << one.output;
  // The same text as four launched ranks planning the same layout.
  auto at = [](const std::string& s) { return s.substr(std::min(s.find("# layout"), s.size())); };
  auto four = run_scaletrain(4, base + " --set parallel.tp=1");
  auto four_w = run_scaletrain(1, base + " --set parallel.tp=1 --world=4");
  ASSERT_EQ(four.exit_code, 0) << four.output;
  ASSERT_EQ(four_w.exit_code, 0) << four_w.output;
  EXPECT_FALSE(at(four.output).empty());
  EXPECT_EQ(at(four_w.output), at(four.output));
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--world 8 --config " + src_dir() + "/configs/models/tiny.yaml", "--dry-run only"},
           {base + " --world 0", "--world 0: must be >= 1"},
           {base + " --world 6", "world size 6"},
           {base + " --dryrun", "unknown option '--dryrun'; did you mean '--dry-run'?"}}) {
    auto r = run_scaletrain(1, args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
  }
}
