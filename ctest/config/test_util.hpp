// Helpers for the config tests: a scratch folder with YAML files in it.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/config.hpp"
#include "core/error.hpp"

namespace st::test {

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    auto base = std::filesystem::temp_directory_path();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = base / ("st_config_" + std::string(info ? info->name() : "x") + "_" +
                    std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Parameter count of the Llama-style model (untied head, RMSNorm weights).
inline long long param_count(const ModelCfg& m) {
  const long long d = m.d_model, hd = m.d_model / m.n_heads;
  const long long per_layer = 2 * d + d * (m.n_heads * hd) + 2 * d * (m.n_kv_heads * hd) +
                              (m.n_heads * hd) * d + 3 * d * m.ffn_hidden;
  return 1LL * m.vocab_size * d * 2 + m.n_layers * per_layer + d;
}

}  // namespace st::test
