// The model against an independent PyTorch implementation
// (ctest/model/torch_reference.py, fp32, autograd): this test writes the
// initial weights, tokens and targets to a temp folder (raw .bin files and a
// manifest.json), runs the script with $SCALETRAIN_PYTHON, and compares the
// loss and every parameter gradient.
//
// Tolerance (fp32 vs fp32, different summation orders): per tensor,
// ||ours - torch|| / max(||torch||, 1e-30) < 1e-4, and |loss - loss_ref| <
// 1e-4 * |loss_ref|. Skipped, with the reason, when python3 or torch is missing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "core/util.hpp"
#include "model/model.hpp"

namespace fs = std::filesystem;
namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void write_bin(const fs::path& p, const void* data, size_t bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
  ASSERT_TRUE(f.good()) << p;
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::vector<float> v(size_t(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

struct Python {
  std::string exe, script, skip_reason;
};

Python find_python() {
  Python p;
  auto exe = st::env("SCALETRAIN_PYTHON");
  auto src = st::env("SCALETRAIN_SOURCE_DIR");
  if (!exe || exe->empty()) {
    p.skip_reason = "SCALETRAIN_PYTHON is not set (python3 not found at configure time)";
    return p;
  }
  if (!src) {
    p.skip_reason = "SCALETRAIN_SOURCE_DIR is not set";
    return p;
  }
  p.exe = *exe;
  p.script = (fs::path(*src) / "ctest" / "model" / "torch_reference.py").string();
  const std::string probe = shell_quote(p.exe) + " -c 'import torch, numpy' > /dev/null 2>&1";
  if (std::system(probe.c_str()) != 0)
    p.skip_reason = p.exe + " cannot import torch and numpy (install python3-torch)";
  return p;
}

void compare_with_torch(const st::ModelCfg& cfg, int B, int T) {
  const Python py = find_python();
  if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;

  std::string tmpl = (fs::temp_directory_path() / "scaletrain_torchref_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path dir(tmpl);

  st::Model m(cfg, 42);
  std::mt19937 rng(123);
  std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T));
  for (auto& t : tokens) t = int32_t(rng() % uint32_t(cfg.vocab_size));
  for (auto& t : targets) t = int32_t(rng() % uint32_t(cfg.vocab_size));

  nlohmann::json man;
  man["config"] = {{"n_layers", cfg.n_layers},     {"d_model", cfg.d_model},
                   {"n_heads", cfg.n_heads},       {"n_kv_heads", cfg.n_kv_heads},
                   {"ffn_hidden", cfg.ffn_hidden}, {"vocab_size", cfg.vocab_size},
                   {"rope_theta", cfg.rope_theta}, {"norm_eps", cfg.norm_eps}};
  man["B"] = B;
  man["T"] = T;
  man["tokens"] = "tokens.bin";
  man["targets"] = "targets.bin";
  write_bin(dir / "tokens.bin", tokens.data(), tokens.size() * 4);
  write_bin(dir / "targets.bin", targets.data(), targets.size() * 4);
  man["params"] = nlohmann::json::array();
  for (st::Param* p : m.params()) {
    const std::string file = p->name + ".bin";
    write_bin(dir / file, p->w.data(), p->w.bytes());
    man["params"].push_back({{"name", p->name}, {"shape", p->w.shape()}, {"file", file}});
  }
  std::ofstream(dir / "manifest.json") << man.dump(1);

  const float loss =
      m.forward_backward(tokens.data(), targets.data(), B, T, 1.f, st::ActCkpt::None);

  const std::string cmd = shell_quote(py.exe) + " " + shell_quote(py.script) + " " +
                          shell_quote(dir.string()) + " > " +
                          shell_quote((dir / "python.log").string()) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << "reference script failed:\n" << st::read_file((dir / "python.log").string());
  const auto res = nlohmann::json::parse(st::read_file((dir / "result.json").string()));
  const double ref_loss = res["loss"].get<double>();
  EXPECT_LT(std::abs(double(loss) - ref_loss), 1e-4 * std::abs(ref_loss))
      << "loss " << loss << " torch " << ref_loss;

  double worst = 0;
  for (st::Param* p : m.params()) {
    const std::vector<float> ref = read_f32(dir / "grads" / (p->name + ".bin"));
    ASSERT_EQ(int64_t(ref.size()), p->g.numel()) << p->name;
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double a = p->g.data()[i], b = ref[i];
      num += (a - b) * (a - b);
      den += b * b;
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    EXPECT_LT(rel, 1e-4) << p->name << " |grad_ref|=" << std::sqrt(den);
    worst = std::max(worst, rel);
  }
  std::cout << "loss " << loss << " torch " << ref_loss << "; worst per-tensor grad rel error "
            << worst << " over " << m.params().size() << " tensors\n";
  std::error_code ec;
  if (!::testing::Test::HasFailure())
    fs::remove_all(dir, ec);
  else
    std::cerr << "kept " << dir << " for inspection\n";
}
}  // namespace

TEST(ModelTorchReference, GroupedQueryAttention) {
  st::ModelCfg c;
  c.n_layers = 2, c.d_model = 32, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_hidden = 48;
  c.vocab_size = 64, c.seq_len = 16, c.init_std = 0.1;
  compare_with_torch(c, 2, 12);
}

TEST(ModelTorchReference, MultiHeadAttention) {
  st::ModelCfg c;
  c.n_layers = 3, c.d_model = 24, c.n_heads = 3, c.n_kv_heads = 3, c.ffn_hidden = 40;
  c.vocab_size = 50, c.seq_len = 10, c.rope_theta = 500.0, c.norm_eps = 1e-6, c.init_std = 0.05;
  compare_with_torch(c, 3, 10);
}
