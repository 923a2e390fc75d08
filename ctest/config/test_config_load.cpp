// Loading: defaults, files, presets, overrides and the YAML/JSON round trip.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

namespace st {
namespace {
using test::TempDir;

TEST(ConfigLoad, EmptyPathGivesStructDefaults) {
  Config c = load_config("", {});
  Config d;
  EXPECT_EQ(config_to_yaml(c), config_to_yaml(d));
  EXPECT_EQ(c.model.n_layers, 8);
  EXPECT_EQ(c.model.name, "default");
  EXPECT_EQ(c.model.preset, "");
  EXPECT_EQ(c.data.source, "synthetic");
  EXPECT_EQ(c.parallel.dp, 0);
}

TEST(ConfigLoad, DefaultPresetEqualsStructDefaults) {
  Config p = load_config("", {"model.preset=default"});
  Config d;
  p.model.preset = "";
  EXPECT_EQ(config_to_yaml(p), config_to_yaml(d));
}

TEST(ConfigLoad, FileSetsEveryType) {
  TempDir t;
  auto f = t.write("run.yaml", R"(
model: {n_layers: 4}
parallel: {sp: true, tp: 2, zero_stage: 2, dp_bucket_mb: 12.5}
train: {steps: 7, seed: 18446744073709551615, act_ckpt: full, precision: fp32}
optim: {lr: 1e-3, schedule: linear}
data: {source: file, path: tokens.bin, dtype: uint32}
checkpoint: {interval: 5, resume: none}
runtime: {name: my-run, out: ""}
)");
  Config c = load_config(f, {});
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.name, "custom");
  EXPECT_TRUE(c.parallel.sp);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.zero_stage, 2);
  EXPECT_DOUBLE_EQ(c.parallel.dp_bucket_mb, 12.5);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.seed, 18446744073709551615ULL);
  EXPECT_EQ(c.train.act_ckpt, "full");
  EXPECT_EQ(c.train.precision, "fp32");
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.optim.schedule, "linear");
  EXPECT_EQ(c.data.path, "tokens.bin");
  EXPECT_EQ(c.data.dtype, "uint32");
  EXPECT_EQ(c.checkpoint.interval, 5);
  EXPECT_EQ(c.checkpoint.resume, "none");
  EXPECT_EQ(c.runtime.name, "my-run");
  EXPECT_EQ(c.config_path, f);
}

TEST(ConfigLoad, PresetThenFileKeysThenOverrides) {
  TempDir t;
  auto f = t.write("run.yaml", "model: {preset: tiny, seq_len: 32}\ntrain: {steps: 9}\n");
  Config c = load_config(f, {"train.steps=11", "model.n_layers=4"});
  EXPECT_EQ(c.model.preset, "tiny");
  EXPECT_EQ(c.model.name, "tiny");
  EXPECT_EQ(c.model.d_model, 64);     // from the preset
  EXPECT_EQ(c.model.seq_len, 32);     // file beats preset
  EXPECT_EQ(c.model.n_layers, 4);     // override beats preset
  EXPECT_EQ(c.train.steps, 11);       // override beats file
  EXPECT_EQ(c.train.micro_batch, 4);  // a preset's non-model sections are not included
  EXPECT_EQ(c.overrides.size(), 2u);
}

TEST(ConfigLoad, PresetOverrideReplacesFileModel) {
  TempDir t;
  auto f = t.write("run.yaml", "model: {preset: tiny, seq_len: 32}\n");
  Config c = load_config(f, {"model.preset=llama-7b", "model.seq_len=2048"});
  EXPECT_EQ(c.model.name, "llama-7b");
  EXPECT_EQ(c.model.d_model, 4096);
  EXPECT_EQ(c.model.seq_len, 2048);
}

TEST(ConfigLoad, PresetFileIsACompleteRunConfig) {
  Config c = load_config(preset_dir() + "/tiny.yaml", {});
  EXPECT_EQ(c.model.name, "tiny");
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.train.steps, 4);
}

TEST(ConfigLoad, OverridesParseWithTheKeysType) {
  Config c =
      load_config("", {"parallel.sp=true", "parallel.tp=2", "optim.lr=2.5e-4", "train.seed=7",
                       "data.path=", "runtime.name=a=b", "optim.schedule=constant"});
  EXPECT_TRUE(c.parallel.sp);
  EXPECT_DOUBLE_EQ(c.optim.lr, 2.5e-4);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.runtime.name, "a=b");  // only the first '=' splits
  EXPECT_EQ(c.optim.schedule, "constant");
}

TEST(ConfigLoad, PipelineLayersGiveEachChunkItsLayers) {
  // Default: the even split.
  EXPECT_EQ(pipeline_layer_counts(load_config("", {"parallel.pp=2"})), (std::vector<int>{4, 4}));
  // torchtitan's default split points for Llama 3.1 405B over pp 8, 1F1B and
  // interleaved (two chunks per stage).
  const Config a = load_config(
      "", {"model.n_layers=126", "parallel.pp=8", "parallel.pipeline_layers=15, 16*6 ,15"});
  EXPECT_EQ(pipeline_layer_counts(a), (std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15}));
  const Config b =
      load_config("", {"model.n_layers=126", "parallel.pp=8", "parallel.num_model_chunks=2",
                       "train.grad_accum=8", "parallel.pipeline_layers=7,8*14,7"});
  const std::vector<int> nb = pipeline_layer_counts(b);
  ASSERT_EQ(nb.size(), 16u);
  EXPECT_EQ(nb.front(), 7);
  EXPECT_EQ(nb[8], 8);
  EXPECT_EQ(nb.back(), 7);
  // Without the key an uneven count is refused, naming the key and a split.
  try {
    load_config("", {"model.n_layers=126", "parallel.pp=8"});
    ADD_FAILURE() << "126 layers over pp 8 accepted without parallel.pipeline_layers";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pipeline_layers=15,16*6,15"), std::string::npos)
        << e.what();
  }
  // Bad values name the key and what is valid.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"parallel.pp=2", "parallel.pipeline_layers=3,3"}, "sums to 6"},
      {{"parallel.pp=2", "parallel.pipeline_layers=4,2,2"}, "it needs 2 counts"},
      {{"parallel.pp=2", "parallel.pipeline_layers=8,0"}, "at least 1 layer"},
      {{"parallel.pp=2", "parallel.pipeline_layers=9,-1"}, "at least 1 layer"},
      {{"parallel.pp=2", "parallel.pipeline_layers=4,four"}, "not a layer count"},
      {{"parallel.pp=2", "parallel.pipeline_layers=4*0,8"}, "a repeat must be >= 1"},
      {{"parallel.pp=2", "parallel.pipeline_layers=4,,4"}, "not a layer count"},
      {{"parallel.pp=16", "parallel.pipeline_layers=1*16"}, "fewer than"},
  };
  for (const auto& [sets, says] : bad) {
    try {
      load_config("", sets);
      ADD_FAILURE() << sets.back() << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("parallel."), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigLoad, EmptyAndNullSectionsAreFine) {
  TempDir t;
  EXPECT_NO_THROW(load_config(t.write("empty.yaml", ""), {}));
  EXPECT_NO_THROW(load_config(t.write("null.yaml", "train:\nmodel: ~\n"), {}));
}

TEST(ConfigLoad, YamlRoundTrip) {
  TempDir t;
  Config a = load_config("", {"model.preset=tiny", "runtime.name=yes", "data.path=1",
                              "optim.lr=0.1", "model.norm_eps=1e-6", "train.seed=99"});
  auto f = t.write("dump.yaml", config_to_yaml(a));
  Config b = load_config(f, {});
  EXPECT_EQ(config_to_yaml(a), config_to_yaml(b));
  EXPECT_EQ(b.runtime.name, "yes");
  EXPECT_EQ(b.data.path, "1");
  EXPECT_DOUBLE_EQ(b.model.norm_eps, 1e-6);
}

TEST(ConfigLoad, JsonHasTypedValuesAndReadsBack) {
  TempDir t;
  Config a = load_config("", {"model.preset=tiny", "parallel.tp=2", "parallel.sp=true"});
  auto j = nlohmann::json::parse(config_to_json(a));
  EXPECT_EQ(j["model"]["d_model"], 64);
  EXPECT_EQ(j["parallel"]["sp"], true);
  EXPECT_DOUBLE_EQ(j["optim"]["lr"].get<double>(), 3e-4);
  EXPECT_EQ(j["train"]["precision"], "fp32");
  // JSON is YAML: the dump is itself a valid config.
  Config b = load_config(t.write("dump.json", config_to_json(a)), {});
  EXPECT_EQ(config_to_yaml(a), config_to_yaml(b));
}

TEST(ConfigLoad, ResolveLayoutFillsDp) {
  Config c = load_config("", {"parallel.tp=2"});
  resolve_layout(c, 8);
  EXPECT_EQ(c.parallel.dp, 4);
  Config e = load_config("", {"parallel.dp=2", "parallel.tp=2"});
  EXPECT_NO_THROW(resolve_layout(e, 4));
}

TEST(ConfigLoad, HelpListsEveryKeyWithDefault) {
  std::string h = config_help();
  EXPECT_NE(h.find("train.steps"), std::string::npos);
  EXPECT_NE(h.find("optim.schedule"), std::string::npos);
  EXPECT_NE(h.find("constant|linear|cosine"), std::string::npos);
  EXPECT_NE(h.find("model.preset"), std::string::npos);
}

TEST(ConfigLoad, RepoRunConfigsLoad) {
  const std::string root = preset_dir() + "/../";
  for (const char* f : {"default.yaml"}) {
    Config c = load_config(root + f, {});
    EXPECT_EQ(c.model.name, "default") << f;
    EXPECT_EQ(c.data.source, "file");
    EXPECT_GE(c.train.steps / c.checkpoint.interval, 2) << "a couple of checkpoints";
  }
}

}  // namespace
}  // namespace st

namespace st {
namespace {
TEST(ConfigLoad, PresetDirFromEnvironment) {
  test::TempDir t;
  t.write("mine.yaml", "model: {n_layers: 2, d_model: 64, n_heads: 4, n_kv_heads: 4}\n");
  ::setenv("SCALETRAIN_CONFIG_DIR", t.path().c_str(), 1);
  EXPECT_EQ(preset_dir(), t.path());
  Config c = load_config("", {"model.preset=mine"});
  ::unsetenv("SCALETRAIN_CONFIG_DIR");
  EXPECT_EQ(c.model.name, "mine");
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.model.ffn_hidden, 1152);  // keys a preset leaves out keep their defaults
}
}  // namespace
}  // namespace st
