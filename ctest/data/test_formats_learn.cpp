// The trainer on token files in every published layout, written by this test
// from real English text (ctest/data/layouts.hpp): raw uint16, llm.c uint16
// and uint32, Megatron uint16 and int32, and a folder of 3 llm.c shards. The
// tiny model learns from each; since every file holds the same ids, every
// run draws the same global batches and gives the same loss at every step.
// run.json records the detected format. One run also evaluates on a held-out
// Megatron split: its `eval` events carry a validation loss that falls.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../e2e/run_util.hpp"
#include "layouts.hpp"

using namespace st::test;
namespace fs = std::filesystem;

namespace {
std::vector<double> val_losses(const std::string& run) {
  std::ifstream in(run + "/telemetry/rank_00000.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == "event" && j.value("event", "") == "eval")
      out.push_back(j.at("val_loss").get<double>());
  }
  return out;
}

TEST(FormatsLearn, EveryLayoutTrainsTheSame) {
  const std::string text = english_text();
  if (text.size() < 20000) GTEST_SKIP() << "no English text at /usr/share/common-licenses";
  const std::string dir = fresh_dir("formats-learn");
  // The last 10% of the text is held out for validation.
  const size_t cut = text.size() * 9 / 10;
  const auto ids = byte_ids(text.substr(0, cut)), held = byte_ids(text.substr(cut));
  write_bytes(dir + "/raw.bin", raw_bytes(ids, 2));
  write_bytes(dir + "/l16.bin", llmc_bytes(ids, false));
  write_bytes(dir + "/l32.bin", llmc_bytes(ids, true));
  write_megatron(dir + "/m16", ids, 8);
  write_megatron(dir + "/m32", ids, 4);
  write_megatron(dir + "/val", held, 8);
  fs::create_directories(dir + "/shards");
  const size_t a = ids.size() / 3, b = 2 * ids.size() / 3 + 101;
  write_bytes(dir + "/shards/s0.bin", llmc_bytes({ids.begin(), ids.begin() + long(a)}, false));
  write_bytes(dir + "/shards/s1.bin",
              llmc_bytes({ids.begin() + long(a), ids.begin() + long(b)}, false));
  write_bytes(dir + "/shards/s2.bin", llmc_bytes({ids.begin() + long(b), ids.end()}, false));

  struct Case {
    std::string path, format;
  };
  const std::vector<Case> cases = {{"raw.bin", "raw"},      {"l16.bin", "llmc"},
                                   {"l32.bin", "llmc"},     {"m16", "megatron"},
                                   {"m32.idx", "megatron"}, {"shards", "llmc"}};
  std::vector<double> ref;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    const std::string out = dir + "/run-" + fs::path(c.path).stem().string();
    std::string args = "--config " + src_dir() + "/configs/models/tiny.yaml" +
                       " --set train.steps=40 --set data.source=file --set data.path=" + dir + "/" +
                       c.path +
                       " --set optim.lr=3e-3 --set optim.warmup_steps=5 --set train.micro_batch=4" +
                       " --set runtime.cpu_peak_gflops=1 --out " + out;
    const bool eval = c.path == "raw.bin";
    if (eval)
      args += " --set data.val_path=" + dir + "/val.bin --set train.eval_interval=10" +
              " --set data.val_batches=2";
    auto r = run_scaletrain(1, args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto loss = read_series(out, 0, "loss");
    ASSERT_EQ(loss.size(), 40u);
    const double first = (loss[0] + loss[1]) / 2, last = (loss[38] + loss[39]) / 2;
    EXPECT_GT(first, 5.0) << "an untrained byte model should be near ln(256)";
    EXPECT_LT(last, first - 1.0) << "loss went from " << first << " to " << last;
    // The same ids give the same batches, hence the same losses (to rounding:
    // another batch would differ by ~1e-2). The first run evaluates between
    // steps, which must not change its training either.
    if (ref.empty()) ref = loss;
    for (size_t i = 0; i < loss.size(); ++i)
      EXPECT_NEAR(loss[i], ref[i], 1e-5 * ref[i]) << "step " << i + 1;
    auto rj = nlohmann::json::parse(std::ifstream(out + "/run.json"));
    EXPECT_EQ(rj["config"]["data"]["format"], c.format);
    if (eval) {
      auto v = val_losses(out);
      ASSERT_EQ(v.size(), 4u) << "steps 10, 20, 30, 40";
      EXPECT_LT(v.back(), v.front() - 0.5) << "validation loss should fall too";
      EXPECT_NE(r.output.find("val loss"), std::string::npos) << r.output;
    }
  }
  fs::remove_all(dir);
}
}  // namespace
