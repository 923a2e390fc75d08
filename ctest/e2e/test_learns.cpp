// The model learns from real text: a short run of the tiny model on a
// byte-tokenised English text (the GPL-3 licence text every Debian system
// ships, or the KJV corpus when prepared) brings the loss clearly down from
// the uniform-guess level ln(256) = 5.55.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "run_util.hpp"

using namespace st::test;
namespace fs = std::filesystem;

namespace {
constexpr const char* kText = "/usr/share/common-licenses/GPL-3";

// kText byte-tokenised into DIR/text.bin and the tiny model's command line
// that trains on it for `steps` steps (the caller adds --set and --out).
std::string tiny_on_text(const std::string& dir, int steps) {
  const std::string tok = fs::path(bin()).parent_path().string() + "/scaletrain-tokenize";
  auto t = run_cmd(tok + " -o " + dir + "/text.bin " + kText);
  EXPECT_EQ(t.exit_code, 0) << t.output;
  return "--config " + src_dir() +
         "/configs/models/tiny.yaml --set train.steps=" + std::to_string(steps) +
         " --set data.source=file --set data.path=" + dir +
         "/text.bin --set optim.lr=3e-3 --set optim.warmup_steps=5 --set train.micro_batch=4" +
         " --set runtime.cpu_peak_gflops=1";
}
}  // namespace

TEST(Learning, LossFallsOnRealText) {
  if (!fs::exists(kText)) GTEST_SKIP() << "no English text found at " << kText;
  const std::string dir = fresh_dir("learns");
  auto r = run_scaletrain(2, tiny_on_text(dir, 60) + " --out " + dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto loss = read_series(dir + "/run", 0, "loss");
  ASSERT_EQ(loss.size(), 60u);
  double first = (loss[0] + loss[1]) / 2, last = (loss[58] + loss[59]) / 2;
  EXPECT_GT(first, 5.0) << "an untrained byte model should be near ln(256)";
  EXPECT_LT(last, first - 1.5) << "loss went from " << first << " to " << last;
  fs::remove_all(dir);
}

// optim.state_dtype=bf16 (bf16 masters and moments, stochastic rounding)
// learns as the fp32 state does: the same seed and data in bf16 compute,
// the last 10 steps' mean loss within 0.02 nats (measured: see
// docs/model.md, "Optimizer state precision").
TEST(Learning, Bf16StateLearnsLikeFp32State) {
  if (!fs::exists(kText)) GTEST_SKIP() << "no English text found at " << kText;
  const std::string dir = fresh_dir("learns-bf16");
  const std::string args = tiny_on_text(dir, 100);
  auto run = [&](const std::string& state) {
    auto r =
        run_scaletrain(2, args + " --set train.precision=bf16 --set optim.state_dtype=" + state +
                              " --out " + dir + "/" + state);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto loss = read_series(dir + "/" + state, 0, "loss");
    EXPECT_EQ(loss.size(), 100u);
    double tail = 0;
    for (size_t i = loss.size() >= 10 ? loss.size() - 10 : 0; i < loss.size(); ++i)
      tail += loss[i] / 10;
    return tail;
  };
  const double fp32 = run("fp32"), bf16 = run("bf16");
  std::printf("last 10 steps' mean loss: fp32 state %.4f, bf16 state %.4f\n", fp32, bf16);
  EXPECT_LT(fp32, 4.0) << "the fp32-state run did not learn";
  EXPECT_NEAR(bf16, fp32, 0.02) << "bf16 state " << bf16 << " vs fp32 state " << fp32;
  fs::remove_all(dir);
}
