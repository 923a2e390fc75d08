// scaletrain-plan calibrate-gpu's table writing. The real
// scaletrain-bench-gemm needs a GPU, which this machine has not, so a shell
// script speaking its output format (last line "bf16_gemm_tflops=<x>",
// exit 77 without a GPU) stands in for it; what is tested is everything
// around the measurement: the shapes asked for, the parsing, the table
// written into the cluster file and read back, the failures named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "planner/gpu_rates.hpp"

namespace {
namespace fs = std::filesystem;

std::string src() {
  const char* s = std::getenv("SCALETRAIN_SOURCE_DIR");
  return s ? s : ".";
}

class GpuRates : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("st_gpu_rates_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string script(const std::string& body) {
    const auto p = dir_ / "bench.sh";
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }
  std::string error(const std::string& bench) {
    std::ostringstream log;
    try {
      st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml",
                              (dir_ / "out.yaml").string(), bench, "test", log);
    } catch (const st::UsageError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(GpuRates, MeasuredGemmTableReplacesThePublishedOne) {
  // rate = M / 16 TFLOP/s: 256 -> 16, 8192 -> 512; the arguments echoed back
  const std::string bench =
      script("echo \"shape $1 $2 $3 iters $4\"; echo bf16_gemm_tflops=$(($1 / 16))");
  std::ostringstream log;
  const std::string out = (dir_ / "out.yaml").string();
  st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml", out, bench, "cmd", log);
  const st::plan::Cluster c = st::plan::load_cluster(out);
  const auto shapes = st::plan::default_gemm_shapes();
  ASSERT_EQ(c.rates.gemm.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(c.rates.gemm[i].m, shapes[i][0]);
    EXPECT_EQ(c.rates.gemm[i].n, shapes[i][1]);
    EXPECT_EQ(c.rates.gemm[i].k, shapes[i][2]);
    EXPECT_DOUBLE_EQ(c.rates.gemm[i].flops, double(shapes[i][0] / 16) * 1e12);
  }
  EXPECT_EQ(c.rates.gemm.front().m, 256);
  EXPECT_EQ(c.rates.gemm.back().m, 8192);
  // the rest of the base file carried over
  EXPECT_FALSE(c.rates.attention.empty());
  EXPECT_FALSE(c.rates.intra.empty());
  EXPECT_NEAR(c.memory_bytes / 1048576.0, 81559, 5);
  EXPECT_EQ(c.meta.at("command"), "cmd");
  // The base file's comments stay (the sources of the figures not
  // measured), but the published GEMM figure's citation goes with it.
  const std::string text = st::read_file(out);
  EXPECT_NE(text.find("# Fused attention, bf16, H100 80GB SXM5"), std::string::npos) << text;
  EXPECT_NE(text.find("# NVIDIA H100 SXM5 80 GB, 8 per node"), std::string::npos) << text;
  EXPECT_NE(text.find("network_intra (NVLink 4 / NVSwitch"), std::string::npos) << text;
  EXPECT_EQ(text.find("792.1"), std::string::npos) << text;
  EXPECT_NE(text.find("measured on this machine by calibrate-gpu"), std::string::npos) << text;
  // Calibrating the calibrated file again replaces the table and the
  // `calibrated:` section rather than adding a second of either.
  const std::string again = (dir_ / "again.yaml").string();
  st::plan::calibrate_gpu(out, again, bench, "cmd2", log);
  const st::plan::Cluster c2 = st::plan::load_cluster(again);
  EXPECT_EQ(c2.rates.gemm.size(), shapes.size());
  EXPECT_EQ(c2.meta.at("command"), "cmd2");
  const std::string text2 = st::read_file(again);
  EXPECT_EQ(text2.find("\ncalibrated:"), text2.rfind("\ncalibrated:"));
  EXPECT_EQ(text2.find("\n  gemm:"), text2.rfind("\n  gemm:"));
  EXPECT_NE(text2.find("# Fused attention, bf16, H100 80GB SXM5"), std::string::npos);
}

// What nccl-tests' all_reduce_perf prints (its README's layout): a '#'
// header naming the columns, then size, count, type, redop, root and, out
// of place and in place, time, algbw, busbw and #wrong.
const char* kNcclTests =
    R"(# nThread 1 nGpus 8 minBytes 1048576 maxBytes 1073741824 step: 32(factor)
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    40.52   25.88   45.29      0    40.01   26.21   45.86      0
    33554432       8388608     float     sum      -1    213.4  157.24  275.17      0    212.9  157.61  275.82      0
  1073741824     268435456     float     sum      -1   4721.3  227.42  397.99      0   4719.8  227.50  398.12      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 239.48
)";

TEST_F(GpuRates, NcclTestsTablesBecomeTheBusBandwidthRows) {
  const std::string gemm = script("echo bf16_gemm_tflops=100");
  const auto nccl = dir_ / "nccl.txt";
  std::ofstream(nccl) << kNcclTests;
  const std::string out = (dir_ / "out.yaml").string();
  std::ostringstream log;
  st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml", out, gemm, "cmd", log,
                          "cat " + nccl.string());
  const st::plan::Cluster c = st::plan::load_cluster(out);
  ASSERT_EQ(c.rates.intra.size(), 3u);
  EXPECT_DOUBLE_EQ(c.rates.intra[0].bytes, 1048576);
  EXPECT_DOUBLE_EQ(c.rates.intra[0].busbw, 45.29e9);  // out of place
  EXPECT_DOUBLE_EQ(c.rates.intra[2].busbw, 397.99e9);
  // The inter-node table was not measured: the published row and its
  // citation stay; the intra-node one's citation goes with its row.
  ASSERT_EQ(c.rates.inter.size(), 1u);
  EXPECT_DOUBLE_EQ(c.rates.inter[0].busbw, 425e9);
  const std::string text = st::read_file(out);
  EXPECT_NE(text.find("Saturn Cloud"), std::string::npos) << text;
  EXPECT_EQ(text.find("Alaya NeW"), std::string::npos) << text;
  EXPECT_NE(c.meta.at("busbw_intra_rates").find("cat "), std::string::npos);
  // Wrong results are an error, not a rate; no table at all is named.
  std::string bad = kNcclTests;
  bad.replace(bad.find("275.17      0"), 13, "275.17      3");
  EXPECT_THROW(st::plan::parse_nccl_tests(bad, "probe"), st::UsageError);
  try {
    st::plan::parse_nccl_tests("hello\n", "probe");
    ADD_FAILURE() << "no table accepted";
  } catch (const st::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("probe: no nccl-tests table"), std::string::npos);
  }
}

TEST_F(GpuRates, AttentionBenchRowsReplaceThePublishedOnes) {
  // scaletrain-bench-attention's arguments: T head_dim heads tokens iterations;
  // here forward T/32 and backward T/64 TFLOP/s.
  const std::string gemm = script("echo bf16_gemm_tflops=100");
  const auto attn = dir_ / "attn.sh";
  std::ofstream(attn) << "#!/bin/sh\necho \"T $1 hd $2 heads $3 tokens $4 iters $5\"\n"
                      << "echo attn_fwd_tflops=$(($1 / 32))\necho attn_bwd_tflops=$(($1 / 64))\n";
  fs::permissions(attn, fs::perms::owner_all);
  const std::string out = (dir_ / "out.yaml").string();
  std::ostringstream log;
  st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml", out, gemm, "cmd", log, "",
                          "", attn.string());
  const st::plan::Cluster c = st::plan::load_cluster(out);
  ASSERT_EQ(c.rates.attention.size(), 6u);
  for (const auto& a : c.rates.attention) {
    EXPECT_EQ(a.head_dim, 128);
    EXPECT_DOUBLE_EQ(a.fwd_flops, a.seq / 32 * 1e12) << a.seq;
    EXPECT_DOUBLE_EQ(a.bwd_flops, a.seq / 64 * 1e12) << a.seq;
  }
  EXPECT_EQ(c.rates.attention.front().seq, 512);
  EXPECT_EQ(c.rates.attention.back().seq, 16384);
  const std::string text = st::read_file(out);
  EXPECT_EQ(text.find("FlashAttention-3"), std::string::npos) << text;
  EXPECT_NE(text.find("Alaya NeW"), std::string::npos) << text;  // busbw not measured: kept
  EXPECT_NE(c.meta.at("other_rates").find("busbw_intra, busbw_inter"), std::string::npos);
  // A bench that prints only one of the two rates is named.
  std::ofstream(attn) << "#!/bin/sh\necho attn_fwd_tflops=300\n";
  std::ostringstream log2;
  try {
    st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml", out, gemm, "cmd", log2,
                            "", "", attn.string());
    ADD_FAILURE() << "half a result accepted";
  } catch (const st::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no positive attn_fwd_tflops= and attn_bwd_tflops="),
              std::string::npos)
        << e.what();
  }
}

// The memory bench (scaletrain-bench-memory's format: "mem_bytes=<B>
// mem_gbps=<x>" per size, "launch_us=<x>") and the attention bench's block
// mode (--block first; "block_full_*" beside the causal lines) become
// rates.memory, rates.launch_us and `full` attention rows at the chunk
// length; the base file's published figures and their citations go, the
// file reads back priced by rates. Its malformed outputs are named.
TEST_F(GpuRates, MemoryAndRingBlockRatesFromTheirBenches) {
  const std::string gemm = script("echo bf16_gemm_tflops=100");
  const auto mem = dir_ / "mem.sh", attn = dir_ / "attn.sh";
  std::ofstream(mem) << "#!/bin/sh\necho \"iters $1\"\n"
                     << "echo mem_bytes=393216 mem_gbps=700.5\n"
                     << "echo mem_bytes=1610612736 mem_gbps=2900\necho launch_us=2.5\n";
  std::ofstream(attn) << "#!/bin/sh\n[ \"$1\" = --block ] || exit 3\nshift\n"
                      << "echo attn_fwd_tflops=$(($1 / 32))\necho attn_bwd_tflops=$(($1 / 64))\n"
                      << "echo block_diag_fwd_tflops=1\necho block_diag_bwd_tflops=1\n"
                      << "echo block_full_fwd_tflops=$(($1 / 16))\n"
                      << "echo block_full_bwd_tflops=$(($1 / 8))\n";
  for (const auto& p : {mem, attn}) fs::permissions(p, fs::perms::owner_all);
  const std::string out = (dir_ / "out.yaml").string();
  std::ostringstream log;
  st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml", out, gemm, "cmd", log, "",
                          "", attn.string(), mem.string(), true);
  const st::plan::Cluster c = st::plan::load_cluster(out);
  EXPECT_EQ(c.pricing, "rates");
  ASSERT_EQ(c.rates.memory.size(), 2u);
  EXPECT_DOUBLE_EQ(c.rates.memory[0].bytes, 393216);
  EXPECT_DOUBLE_EQ(c.rates.memory[1].bw, 2900e9);
  EXPECT_DOUBLE_EQ(c.rates.launch, 2.5e-6);
  ASSERT_EQ(c.rates.attention.size(), 12u);
  int full = 0;
  for (const auto& a : c.rates.attention) {
    if (a.block != "full") continue;
    ++full;
    // Measured at T, written at the chunk T / 2: fwd T/16 = seq/8.
    EXPECT_DOUBLE_EQ(a.fwd_flops, a.seq / 8 * 1e12) << a.seq;
    EXPECT_DOUBLE_EQ(a.bwd_flops, a.seq / 4 * 1e12) << a.seq;
  }
  EXPECT_EQ(full, 6);
  const std::string text = st::read_file(out);
  EXPECT_EQ(text.find("inferred"), std::string::npos) << text;  // the H100 file's memory citation
  EXPECT_EQ(text.find("assumed, not measured"), std::string::npos) << text;
  EXPECT_NE(c.meta.at("memory_rates").find(mem.string()), std::string::npos);

  auto named = [](const std::string& text) {
    try {
      st::plan::parse_memory_bench(text, "bench");
    } catch (const st::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(named("mem_bytes=100 mem_gbps=5\n").find("launch_us="), std::string::npos);
  EXPECT_NE(named("launch_us=3\n").find("mem_bytes="), std::string::npos);
  EXPECT_NE(named("mem_bytes=100 mem_gbps=5\nmem_bytes=50 mem_gbps=6\nlaunch_us=1\n")
                .find("sizes must ascend"),
            std::string::npos);
  EXPECT_NE(named("mem_bytes=100 mem_gbps=-5\nlaunch_us=1\n").find("positive"), std::string::npos);
  try {
    st::plan::parse_attention_bench("attn_fwd_tflops=3\nattn_bwd_tflops=2\n", "bench", 128, 1024,
                                    true);
    ADD_FAILURE() << "block mode without block lines accepted";
  } catch (const st::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("block_full_fwd_tflops="), std::string::npos) << e.what();
  }
}

// With a model, calibrate-gpu also measures its step's own GEMM shapes:
// each distinct one once (in any order of its dimensions), none of the
// default grid again, the LM head's among them; the bench is asked for
// each and every one is written.
TEST_F(GpuRates, TheModelsOwnGemmShapes) {
  const st::Config cfg = st::load_config(src() + "/configs/models/tiny.yaml",
                                         {"data.source=synthetic", "model.seq_len=64"});
  const auto grid = st::plan::default_gemm_shapes();
  const auto shapes = st::plan::model_gemm_shapes(cfg, grid);
  ASSERT_FALSE(shapes.empty());
  auto sorted = [](st::plan::GemmShape s) {
    std::sort(s.begin(), s.end());
    return s;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(sorted(shapes[i]), sorted(shapes[j]));
    for (const auto& g : grid) EXPECT_NE(sorted(shapes[i]), sorted(g));
  }
  // The head: rows x vocabulary x d_model.
  const int64_t rows = int64_t(cfg.train.micro_batch) * cfg.model.seq_len;
  const st::plan::GemmShape head =
      sorted({rows, int64_t(cfg.model.vocab_size), int64_t(cfg.model.d_model)});
  EXPECT_TRUE(
      std::any_of(shapes.begin(), shapes.end(), [&](const auto& s) { return sorted(s) == head; }));
  const std::string bench =
      script("echo \"$1 $2 $3\" >> " + (dir_ / "asked").string() + "; echo bf16_gemm_tflops=100");
  std::ostringstream log;
  const std::string out = (dir_ / "out.yaml").string();
  st::plan::calibrate_gpu(src() + "/configs/clusters/h100-sxm-80gb.yaml", out, bench, "cmd", log,
                          "", "", "", "", false, shapes);
  const st::plan::Cluster c = st::plan::load_cluster(out);
  EXPECT_EQ(c.rates.gemm.size(), grid.size() + shapes.size());
  const std::string asked = st::read_file((dir_ / "asked").string());
  for (const auto& [m, n, k] : shapes)
    EXPECT_NE(asked.find(std::to_string(m) + " " + std::to_string(n) + " " + std::to_string(k)),
              std::string::npos);
}

TEST_F(GpuRates, FailuresAreNamed) {
  EXPECT_NE(error(script("echo 'SKIP: no CUDA device'; exit 77")).find("no GPU visible"),
            std::string::npos);
  EXPECT_NE(error(script("echo hello")).find("without a positive bf16_gemm_tflops= line"),
            std::string::npos);
  EXPECT_NE(error(script("echo bf16_gemm_tflops=3; exit 1")).find("exited 1"), std::string::npos);
  EXPECT_NE(error((dir_ / "missing-bench").string()).find("exited 127"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "out.yaml"));
}

}  // namespace
