// The PyTorch peer of the GPU comparison (scripts/torch_peer_step.py; issue 52,
// docs/cuda.md) on a CPU with the distribution's torch: it reads a model the
// way the trainer does (its parameter count and shape equal `scaletrain
// --dry-run`'s for presets, a run config naming a preset, and --set
// overrides), trains the tiny shape for a few steps on one fixed batch (the
// JSON it prints has every field the GPU script reads, sane; bf16 parameters,
// gradients and AdamW state; the loss finite and falling; tokens/s, FLOPs per
// token and MFU by the trainer's formula), computes the documented model
// (loss and gradients against ctest/model/torch_reference.py), and refuses bad
// keys by name.
// Skipped, with the reason, when python3 or torch is missing. No timing is
// asserted: the figures are the GPU script's to print.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "../e2e/run_util.hpp"

using namespace st::test;

namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string python() { return env_or("SCALETRAIN_PYTHON", ""); }

// Why the peer cannot run here ("" when it can).
std::string python_missing() {
  if (python().empty()) return "SCALETRAIN_PYTHON is not set (python3 not found at configure time)";
  if (std::system((quote(python()) + " -c 'import torch, yaml' > /dev/null 2>&1").c_str()) != 0)
    return python() + " cannot import torch and yaml (install python3-torch python3-yaml)";
  return "";
}

RunResult peer_run(const std::string& args) {
  return run_cmd(quote(python()) + " " + quote(src_dir() + "/scripts/torch_peer_step.py") + " " +
                 args);
}

// The peer's JSON object: its output's last line (warnings may precede it).
nlohmann::json peer_json(const std::string& args) {
  auto r = peer_run(args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const auto nl = out.rfind('\n');
  auto j = nlohmann::json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j.is_discarded() ? nlohmann::json::object() : j;
}

// The trainer's parameter count and model keys from its dry run:
// "parameters  N (x M)" and the resolved config's `model:` section.
std::map<std::string, std::string> trainer_model(const std::string& args) {
  auto r = run_cmd(bin() + " --dry-run " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  std::map<std::string, std::string> m;
  std::istringstream in(r.output);
  std::string line;
  bool model = false;
  while (std::getline(in, line)) {
    if (line.rfind("parameters ", 0) == 0) {
      std::istringstream w(line.substr(11));
      w >> m["n_params"];
    }
    if (line.rfind("model:", 0) == 0) {
      model = true;
      continue;
    }
    if (model && line.rfind("  ", 0) != 0) model = false;
    if (model) {
      const auto c = line.find(':');
      if (c == std::string::npos) continue;
      std::string k = line.substr(2, c - 2), v = line.substr(c + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      m[k] = v;
    }
  }
  return m;
}

class TorchPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = python_missing();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// The same description gives the same model: the comparison's preset and two
// others (each case costs a torch import, seconds here), a run config that
// names a preset, and --set overrides (a preset replaced, then keys changed).
TEST_F(TorchPeer, ModelIsTheTrainers) {
  std::vector<std::string> cases;
  for (const char* p : {"llama-8b", "llama-1b", "tiny"})
    cases.push_back("--config " + quote(src_dir() + "/configs/models/" + p + ".yaml"));
  const std::string tiny = cases.back();
  cases.push_back("--config " + quote(src_dir() + "/configs/default.yaml"));
  cases.push_back(tiny + " --set model.n_kv_heads=4 --set model.ffn_hidden=96 " +
                  "--set model.vocab_size=300 --set model.seq_len=32");
  cases.push_back(tiny + " --set model.n_layers=5 --set model.preset=llama-8b " +
                  "--set model.seq_len=4096");
  for (const auto& c : cases) {
    auto t = trainer_model(c);
    auto p = peer_json("--params-only " + c);
    ASSERT_TRUE(p.contains("n_params")) << c;
    EXPECT_EQ(std::to_string(p["n_params"].get<long long>()), t["n_params"]) << c;
    for (const char* k :
         {"n_layers", "d_model", "n_heads", "n_kv_heads", "ffn_hidden", "vocab_size", "seq_len"})
      EXPECT_EQ(std::to_string(p["model"][k].get<long long>()), t[k]) << c << ": model." << k;
  }
}

// A few steps of the tiny shape on the CPU: the fields gpu-check.sh reads,
// their values sane, the loss finite and falling on the fixed batch.
TEST_F(TorchPeer, TrainsTinyOnCpu) {
  const int B = 2, ga = 2, steps = 3, warmup = 1;
  const std::string cfg = "--config " + quote(src_dir() + "/configs/models/tiny.yaml");
  auto t = trainer_model(cfg);
  auto j = peer_json(cfg + " --set train.micro_batch=2 --set train.grad_accum=2" +
                     " --set optim.lr=1e-2 --set runtime.device=cpu --set train.precision=bf16" +
                     " --set train.act_ckpt=full --set optim.state_dtype=bf16" +
                     " --steps 3 --warmup 1 --threads 1 --peak-tflops 0.01");
  for (const char* k : {"torch",
                        "device",
                        "device_name",
                        "n_params",
                        "tokens_per_step",
                        "tokens_per_s",
                        "step_s_median",
                        "step_s_min",
                        "step_s_max",
                        "step_s_spread_pct",
                        "flops_per_token",
                        "mfu_pct",
                        "hfu_pct",
                        "peak_memory_gib",
                        "compile",
                        "compile_note",
                        "fused",
                        "optimizer",
                        "param_dtype",
                        "grad_dtype",
                        "optimizer_state_dtype",
                        "losses",
                        "load1_before",
                        "load1_after",
                        "cores",
                        "ignored_keys"})
    ASSERT_TRUE(j.contains(k)) << "no field " << k << " in " << j.dump();
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(std::to_string(j["n_params"].get<long long>()), t["n_params"]);
  const double T = 64, L = 2, d = 64, N = j["n_params"].get<double>();
  EXPECT_EQ(j["tokens_per_step"].get<double>(), B * ga * T);
  // bf16 everywhere, as the field's one-GPU run.
  EXPECT_EQ(j["param_dtype"], "bfloat16");
  EXPECT_EQ(j["grad_dtype"], "bfloat16");
  EXPECT_EQ(j["optimizer_state_dtype"], "bfloat16");
  EXPECT_EQ(j["act_ckpt"], "full");
  // Compile and fused AdamW are said, whichever way they went.
  if (!j["compile"].get<bool>()) {
    EXPECT_FALSE(j["compile_note"].get<std::string>().empty());
  }
  EXPECT_EQ(j["optimizer"], j["fused"].get<bool>() ? "AdamW fused" : "AdamW foreach");
  // The keys the peer does not honour are named, not silently dropped;
  // optim.state_dtype is honoured (checked against the parameters' dtype).
  const auto ign = j["ignored_keys"].dump();
  EXPECT_NE(ign.find("train.steps"), std::string::npos) << ign;
  EXPECT_EQ(ign.find("optim.state_dtype"), std::string::npos) << ign;
  // Timing: the median among the steps, tokens/s from it.
  ASSERT_EQ(j["step_s"].size(), size_t(steps));
  const double med = j["step_s_median"], lo = j["step_s_min"], hi = j["step_s_max"];
  EXPECT_GT(lo, 0.0);
  EXPECT_LE(lo, med);
  EXPECT_LE(med, hi);
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * med, B * ga * T, 1e-6 * B * ga * T);
  // The trainer's MFU formula: (6N + 12 L d T) per token over the peak; HFU 4/3 of it.
  const double fpt = 6 * N + 12 * L * d * T;
  EXPECT_DOUBLE_EQ(j["flops_per_token"].get<double>(), fpt);
  const double mfu = 100 * j["tokens_per_s"].get<double>() * fpt / 0.01e12;
  EXPECT_NEAR(j["mfu_pct"].get<double>(), mfu, 1e-9 * mfu);
  EXPECT_NEAR(j["hfu_pct"].get<double>(), mfu * 4 / 3, 1e-9 * mfu);
  EXPECT_GT(j["peak_memory_gib"].get<double>(), 0.0);
  EXPECT_GE(j["load1_before"].get<double>(), 0.0);
  EXPECT_GE(j["load1_after"].get<double>(), 0.0);
  EXPECT_GE(j["cores"].get<int>(), 1);
  // The loss: every step's finite, the first near ln(V) (random weights of std
  // 0.02), falling over the steps on the one batch.
  const auto losses = j["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), size_t(warmup + steps));
  for (double x : losses) EXPECT_TRUE(std::isfinite(x)) << j["losses"].dump();
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.1);
  EXPECT_LT(losses.back(), losses.front() - 0.2) << j["losses"].dump();
  for (size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << i;
}

// The peer computes the documented model: its loss and every gradient, through
// its recomputed blocks in fp32, against the independent reference of
// test_model_torch_reference with the same weights (norm gains away from 1) and
// tokens (ctest/model/peer_vs_reference.py; kv heads shared, odd sizes). A
// swapped gate/up or kv heads repeated in the wrong order fail it (tried).
TEST_F(TorchPeer, ComputesTheReferenceModel) {
  auto r = run_cmd(quote(python()) + " " + quote(src_dir() + "/ctest/model/peer_vs_reference.py") +
                   " " + quote(src_dir()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const auto nl = out.rfind('\n');
  auto j = nlohmann::json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["params"].get<int>(), 2 * 9 + 3);  // every peer parameter is the reference's
  const double loss = j["loss"], ref = j["loss_ref"];
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref)) << j.dump();  // fp32
  EXPECT_LT(j["grad_rel_max"].get<double>(), 1e-4) << j.dump();
}

// The torch.compile paths, with a stand-in compiler on a torch that has none
// (ctest/model/peer_compile_paths.py): every block wrapped, the recompile
// limit raised above one entry per block, and a compiler failure at the first
// step falls back to eager, says so, and trains the same.
TEST_F(TorchPeer, CompilePathsWithAStandIn) {
  auto run = [](const std::string& mode) {
    auto r =
        run_cmd(quote(python()) + " " + quote(src_dir() + "/ctest/model/peer_compile_paths.py") +
                " " + quote(src_dir()) + " " + mode);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto at = r.output.rfind("\n{");
    auto j = nlohmann::json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1), nullptr,
                                   false);
    EXPECT_FALSE(j.is_discarded()) << r.output;
    return j.is_discarded() ? nlohmann::json::object() : j;
  };
  auto ok = run("ok"), bad = run("fail");
  ASSERT_TRUE(ok.contains("compile") && bad.contains("compile"));
  EXPECT_EQ(ok["wrapped"].get<int>(), 3);  // n_layers
  EXPECT_GE(ok["cache_size_limit"].get<int>(), 3);
  EXPECT_TRUE(ok["compile"].get<bool>());
  EXPECT_EQ(ok["compile_note"], "per block");
  EXPECT_FALSE(bad["compile"].get<bool>());
  EXPECT_NE(bad["compile_note"].get<std::string>().find("planted compiler failure"),
            std::string::npos)
      << bad.dump();
  EXPECT_EQ(bad["resets"].get<int>(), 1);
  EXPECT_EQ(ok["losses"], bad["losses"]);  // eager after the fallback: the same steps
}

// Without a peak there is no MFU, said as null rather than a made-up number.
TEST_F(TorchPeer, NoPeakNoMfu) {
  auto j = peer_json("--config " + quote(src_dir() + "/configs/models/tiny.yaml") +
                     " --set runtime.device=cpu --set train.micro_batch=1 --steps 1 --warmup 0" +
                     " --threads 1 --no-compile");
  EXPECT_TRUE(j["mfu_pct"].is_null()) << j.dump();
  EXPECT_TRUE(j["peak_tflops"].is_null()) << j.dump();
  EXPECT_FALSE(j["compile"].get<bool>());
}

// Bad input is refused with exit 2, naming the key or argument.
TEST_F(TorchPeer, RefusesBadInputByName) {
  const std::string tiny = "--config " + quote(src_dir() + "/configs/models/tiny.yaml") + " ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {tiny + "--set model.n_layer=3", "model.n_layer"},
      {tiny + "--set train.act_ckpt=selective", "train.act_ckpt"},
      {tiny + "--set train.precision=fp8", "train.precision"},
      {tiny + "--set optim.state_dtype=fp32", "optim.state_dtype"},
      {tiny + "--set model.n_kv_heads=3", "model.n_kv_heads"},
      {tiny + "--set model.d_model=sixty", "model.d_model"},
      {tiny + "--set train.micro_batch=0", "train.micro_batch"},
      {tiny + "--set model.preset=llama-9b", "llama-8b"},
      {tiny + "--set trainmicro_batch", "section.key=value"},
      {"--config /nonexistent.yaml", "/nonexistent.yaml"},
  };
  for (const auto& [args, says] : bad) {
    auto r = peer_run(args + " --params-only");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
