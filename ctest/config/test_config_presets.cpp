// Model presets: each loads, passes validation, and has the parameter count of
// the published model it copies (untied LM head, as scaletrain builds it).
#include <cmath>
#include <filesystem>

#include "test_util.hpp"

namespace st {
namespace {
using test::param_count;

struct Published {
  const char* preset;
  double params;          // published count
  double tied_embedding;  // subtract when the published model ties its head (vocab*d)
};

TEST(ConfigPresets, MatchPublishedParameterCounts) {
  const Published rows[] = {
      {"llama-1b", 1.2358144e9, 128256.0 * 2048},  // Llama 3.2 1B ties input/output embeddings
      {"llama-7b", 6.74e9, 0},                     // Llama 2 7B: 6,738,415,616
      {"llama-8b", 8.03e9, 0},                     // Llama 3 8B: 8,030,261,248 (untied)
      {"llama-13b", 13.02e9, 0},                   // Llama 2 13B: 13,015,864,320
      {"llama-70b", 68.98e9, 0},                   // Llama 2 70B: 68,976,648,192
      {"llama-175b", 175e9, 0},                    // GPT-3 175B shape
  };
  for (const auto& r : rows) {
    Config c = load_config("", {std::string("model.preset=") + r.preset});
    EXPECT_EQ(c.model.name, r.preset);
    double n = static_cast<double>(param_count(c.model)) - r.tied_embedding;
    EXPECT_NEAR(n / r.params, 1.0, 0.01) << r.preset << ": " << n;
  }
}

TEST(ConfigPresets, ExactCounts) {
  auto count = [](const char* p) {
    return param_count(load_config("", {std::string("model.preset=") + p}).model);
  };
  EXPECT_EQ(count("llama-7b"), 6738415616LL);
  EXPECT_EQ(count("llama-8b"), 8030261248LL);
  EXPECT_EQ(count("llama-13b"), 13015864320LL);
  EXPECT_EQ(count("llama-70b"), 68976648192LL);
  EXPECT_EQ(count("llama-1b") - 128256LL * 2048, 1235814400LL);
  EXPECT_EQ(count("default"), 19669504LL);
}

TEST(ConfigPresets, DefaultIsAboutTwentyMillionAndTinyIsTiny) {
  Config d = load_config("", {"model.preset=default"});
  EXPECT_NEAR(param_count(d.model) / 20e6, 1.0, 0.1);
  EXPECT_EQ(d.model.vocab_size, 256);
  Config t = load_config("", {"model.preset=tiny"});
  EXPECT_LT(param_count(t.model), 200000);
  // tiny must allow the small layouts the mpi tests use.
  EXPECT_NO_THROW(load_config("", {"model.preset=tiny", "parallel.tp=2", "parallel.pp=2"}));
}

TEST(ConfigPresets, EveryPresetFileLoadsOnItsOwn) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(preset_dir())) {
    if (e.path().extension() != ".yaml") continue;
    Config c = load_config(e.path().string(), {});
    EXPECT_EQ(c.model.name, e.path().stem().string()) << e.path();
    ++n;
  }
  EXPECT_GE(n, 8);
}

}  // namespace
}  // namespace st
