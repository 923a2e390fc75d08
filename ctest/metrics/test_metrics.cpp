// Tests of lib/metrics: the MPT MFU/HFU formulas reproduce all 216 published
// rows of analysis/reference/mpt_benchmarks.csv within 0.05 points, the 6N+12LHQT
// form agrees with the MPT count, and device names map to the right peak.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/util.hpp"
#include "metrics/metrics.hpp"

namespace sm = st::metrics;

namespace {
std::string reference_dir() {
  const char* src = std::getenv("SCALETRAIN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/analysis/reference";
}

std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::string line;
  std::getline(f, line);
  auto head = st::split_csv_line(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto v = st::split_csv_line(line);
    std::map<std::string, std::string> r;
    for (size_t i = 0; i < head.size() && i < v.size(); ++i) r[head[i]] = v[i];
    rows.push_back(r);
  }
  return rows;
}
}  // namespace

TEST(Metrics, MptTableMfuHfuWithin005Points) {
  auto models = read_csv(reference_dir() + "/mpt_models.csv");
  std::map<std::string, std::pair<int, int>> shape;
  for (auto& m : models) shape[m["model"]] = {std::stoi(m["n_layers"]), std::stoi(m["d_model"])};
  auto rows = read_csv(reference_dir() + "/mpt_benchmarks.csv");
  ASSERT_EQ(rows.size(), 216u);
  double worst_mfu = 0, worst_hfu = 0;
  for (auto& r : rows) {
    ASSERT_TRUE(shape.count(r["model"])) << r["model"];
    sm::ModelShape s;
    s.n_params = std::stoll(r["num_params"]);
    s.n_layers = shape[r["model"]].first;
    s.d_model = shape[r["model"]].second;
    s.seq_len = std::stoi(r["seq_len"]);
    const int gpus = std::stoi(r["gpus"]);
    const double seq_s = std::stod(r["throughput_tok_s"]) / s.seq_len;
    auto peak = sm::peak_flops(r["gpu"], r["precision"]);
    ASSERT_TRUE(peak) << r["gpu"] << " " << r["precision"];
    const bool ckpt = r["act_ckpt"] == "True";
    double mfu = 100 * sm::utilization(sm::mpt_model_flops_per_seq(s), seq_s, gpus, peak->flops);
    double hfu = 100 * sm::utilization(sm::mpt_hw_flops_per_seq(s, ckpt ? "full" : "none"), seq_s,
                                       gpus, peak->flops);
    EXPECT_NEAR(mfu, std::stod(r["mfu"]), 0.05) << r["table"] << " " << r["model"] << " " << gpus;
    EXPECT_NEAR(hfu, std::stod(r["hfu"]), 0.05) << r["table"] << " " << r["model"] << " " << gpus;
    worst_mfu = std::max(worst_mfu, std::abs(mfu - std::stod(r["mfu"])));
    worst_hfu = std::max(worst_hfu, std::abs(hfu - std::stod(r["hfu"])));
  }
  std::printf("worst |dMFU| = %.4f points, worst |dHFU| = %.4f points over %zu rows\n", worst_mfu,
              worst_hfu, rows.size());
}

TEST(Metrics, SixNTwelveLhqtMatchesMptPerToken) {
  sm::ModelShape s{6'658'000'000, 32, 4096, 32, 2048};
  EXPECT_DOUBLE_EQ(sm::flops_per_token_6n12lhqt(s) * s.seq_len, sm::mpt_model_flops_per_seq(s));
  EXPECT_DOUBLE_EQ(sm::mpt_hw_flops_per_seq(s, "full"), 4 * sm::mpt_flops_per_seq_fwd(s));
  EXPECT_DOUBLE_EQ(sm::mpt_hw_flops_per_seq(s, "none"), sm::mpt_model_flops_per_seq(s));
}

TEST(Metrics, PeakNameMatching) {
  EXPECT_EQ(sm::peak_flops("NVIDIA H100 80GB HBM3", "bf16")->device, "H100 SXM");
  EXPECT_DOUBLE_EQ(sm::peak_flops("NVIDIA H100 80GB HBM3", "bf16")->flops, 989e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("h100_80gb", "amp_fp8")->flops, 1979e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("NVIDIA H100 PCIe", "bf16")->flops, 756e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("NVIDIA A100-SXM4-40GB", "bf16")->flops, 312e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("a100_80gb", "fp32")->flops, 19.5e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("NVIDIA H200", "bf16")->flops, 989e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("NVIDIA B200", "bf16")->flops, 2250e12);
  EXPECT_DOUBLE_EQ(sm::peak_flops("AMD Instinct MI300X", "bf16")->flops, 1307.4e12);
  EXPECT_FALSE(sm::peak_flops("Intel Xeon Platinum", "fp32"));
  EXPECT_FALSE(sm::peak_flops("NVIDIA H100", "int4"));
  EXPECT_FALSE(sm::peak_flops("NVIDIA H100 NVL", "bf16"));
}
