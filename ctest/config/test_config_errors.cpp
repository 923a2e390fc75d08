// Bad inputs: each throws UsageError whose message names the culprit key or
// value and what would be valid. One row per case.
#include <string>
#include <vector>

#include "test_util.hpp"

namespace st {
namespace {
using test::TempDir;

struct Bad {
  const char* name;
  const char* yaml;                    // file content; nullptr = no file
  std::vector<std::string> overrides;  // --set lines
  std::vector<std::string> expect;     // substrings of the message
};

std::string message_of(const Bad& b, const TempDir& t) {
  std::string path = b.yaml ? t.write(std::string(b.name) + ".yaml", b.yaml) : "";
  try {
    load_config(path, b.overrides);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

const std::vector<Bad> kBad = {
    {"unknown_key",
     "train:\n  stpes: 10\n",
     {},
     {"train.stpes", "did you mean 'train.steps'", ":2"}},
    {"unknown_section", "trian: {steps: 1}\n", {}, {"'trian'", "did you mean 'train'"}},
    {"unknown_override_key", nullptr, {"optim.learning_rat=1"}, {"optim.learning_rat", "--set"}},
    {"wrong_type_int", "train:\n  steps: abc\n", {}, {"train.steps", "'abc'", "not an int"}},
    {"wrong_type_float", nullptr, {"optim.lr=fast"}, {"optim.lr", "'fast'", "float"}},
    {"wrong_type_bool",
     nullptr,
     {"parallel.sp=maybe"},
     {"parallel.sp", "'maybe'", "true or false"}},
    {"int_given_float", nullptr, {"train.steps=1.5"}, {"train.steps", "'1.5'", "int"}},
    {"map_for_scalar", "train: {steps: {a: 1}}\n", {}, {"train.steps", "expected a single int"}},
    {"out_of_range", "train: {steps: -5}\n", {}, {"train.steps", "-5", "[1, 1000000000]"}},
    {"out_of_range_float", nullptr, {"optim.beta2=1.5"}, {"optim.beta2", "1.5", "[0, 0.999999]"}},
    {"zero_stage_range",
     nullptr,
     {"parallel.zero_stage=4"},
     {"parallel.zero_stage", "4", "[0, 3]"}},
    {"keep_last_n_zero", nullptr, {"checkpoint.keep_last_n=0"}, {"checkpoint.keep_last_n", "[1,"}},
    {"int_overflow",
     nullptr,
     {"model.d_model=99999999999999999999"},
     {"model.d_model", "out of range"}},
    {"bad_enum",
     "optim: {schedule: cosin}\n",
     {},
     {"optim.schedule", "'cosin'", "constant|linear|cosine", "did you mean 'cosine'"}},
    {"bad_enum_device", nullptr, {"runtime.device=gpu"}, {"runtime.device", "'gpu'", "cpu|cuda"}},
    {"d_model_heads",
     nullptr,
     {"model.d_model=500"},
     {"model.d_model=500", "model.n_heads=8", "multiple of 8"}},
    {"odd_head_dim",
     nullptr,
     {"model.d_model=24", "model.n_heads=8", "model.n_kv_heads=2"},
     {"head_dim 3", "even"}},
    {"kv_gt_heads", nullptr, {"model.n_kv_heads=16"}, {"model.n_kv_heads=16", "model.n_heads=8"}},
    {"kv_not_divisor", nullptr, {"model.n_kv_heads=3"}, {"model.n_heads=8", "model.n_kv_heads=3"}},
    {"heads_tp", nullptr, {"parallel.tp=3"}, {"model.n_heads=8", "parallel.tp=3"}},
    {"kv_heads_tp", nullptr, {"parallel.tp=4"}, {"model.n_kv_heads=2", "parallel.tp=4"}},
    {"layers_pp",
     nullptr,
     {"parallel.pp=3"},
     {"model.n_layers=8", "parallel.pp", "= 3", "multiple of 3"}},
    {"layers_chunks",
     nullptr,
     {"parallel.pp=2", "parallel.num_model_chunks=3", "train.grad_accum=2"},
     {"model.n_layers=8", "num_model_chunks", "= 6"}},
    {"chunks_need_pp",
     nullptr,
     {"parallel.num_model_chunks=2"},
     {"parallel.num_model_chunks=2", "parallel.pp > 1"}},
    {"seq_cp", nullptr, {"parallel.cp=3"}, {"model.seq_len=256", "2*parallel.cp = 6"}},
    {"sp_needs_tp", nullptr, {"parallel.sp=true"}, {"parallel.sp=true", "parallel.tp"}},
    {"file_needs_path", "data: {source: file}\n", {}, {"data.source=file", "data.path"}},
    {"vocab_uint16",
     nullptr,
     {"data.source=file", "data.path=x.bin", "model.vocab_size=70000", "parallel.tp=1"},
     {"model.vocab_size=70000", "data.dtype=uint32"}},
    {"yaml_syntax", "train:\n  steps: 1\n   bad: [1, 2\n", {}, {"YAML syntax error", "line"}},
    {"override_no_eq", nullptr, {"train.steps"}, {"'train.steps'", "section.key=value"}},
    {"override_no_section", nullptr, {"steps=10"}, {"'steps=10'", "section.key=value"}},
    {"override_empty_key", nullptr, {"train.=10"}, {"'train.=10'", "section.key=value"}},
    {"top_level_list", "- 1\n- 2\n", {}, {"must be a map of sections"}},
    {"section_scalar", "train: 5\n", {}, {"section 'train'", "must be a map"}},
    {"duplicate_key", "train:\n  steps: 1\n  steps: 2\n", {}, {"train.steps", "twice", ":3"}},
    {"duplicate_section", "train: {steps: 1}\ntrain: {seed: 2}\n", {}, {"'train'", "twice"}},
    {"run_name_slash", nullptr, {"runtime.name=a/b"}, {"runtime.name", "'a/b'", "without '/'"}},
    // What a device can run is its backend's answer (ctest/e2e/test_bad_input.cpp);
    // the config refuses only what no device can mean.
    {"strict_on_cuda",
     nullptr,
     {"runtime.device=cuda", "runtime.strict_device=true"},
     {"runtime.strict_device=true", "runtime.device=cpu", "runtime.device=cuda"}},
    {"bad_reduce_dtype",
     nullptr,
     {"parallel.grad_reduce_dtype=fp16"},
     {"parallel.grad_reduce_dtype", "'fp16'", "fp32|bf16"}},
};

TEST(ConfigErrors, EachBadInputNamesTheCulprit) {
  TempDir t;
  for (const auto& b : kBad) {
    std::string msg = message_of(b, t);
    for (const auto& s : b.expect)
      EXPECT_NE(msg.find(s), std::string::npos)
          << "case " << b.name << ": expected '" << s << "' in: " << msg;
  }
}

TEST(ConfigErrors, UnknownPresetListsPresets) {
  TempDir t;
  auto f = t.write("p.yaml", "model: {preset: llama-7}\n");
  try {
    load_config(f, {});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("model.preset"), std::string::npos) << m;
    EXPECT_NE(m.find("'llama-7'"), std::string::npos) << m;
    EXPECT_NE(m.find("llama-70b"), std::string::npos) << m;  // in the list of presets
    EXPECT_NE(m.find("tiny"), std::string::npos) << m;
  }
}

TEST(ConfigErrors, MissingFileNamesThePath) {
  try {
    load_config("/nonexistent/dir/run.yaml", {});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/run.yaml"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos);
  }
}

TEST(ConfigErrors, YamlSyntaxErrorNamesFileAndLine) {
  TempDir t;
  auto f = t.write("syntax.yaml", "train:\n  steps: 1\noptim: {lr: [1, 2\n");
  try {
    load_config(f, {});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(f), std::string::npos) << m;
    EXPECT_NE(m.find("line "), std::string::npos) << m;
  }
}

TEST(ConfigErrors, LayoutNotMatchingWorld) {
  Config c = load_config("", {"parallel.dp=3", "parallel.tp=2"});
  try {
    resolve_layout(c, 8);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("= 6"), std::string::npos) << m;  // the product
    EXPECT_NE(m.find("world size 8"), std::string::npos) << m;
    EXPECT_NE(m.find("parallel.dp=4"), std::string::npos) << m;  // what would fit
  }
  Config d = load_config("", {"parallel.tp=2", "parallel.pp=2"});
  try {
    resolve_layout(d, 6);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("world size 6"), std::string::npos) << m;
    EXPECT_NE(m.find("tp*pp*cp = 2*2*1 = 4"), std::string::npos) << m;
  }
}

TEST(ConfigErrors, ErrorsAreUsageErrorsNotCrashes) {
  TempDir t;
  for (const auto& b : kBad) {
    std::string msg = message_of(b, t);
    EXPECT_NE(msg, "<no error>") << "case " << b.name << " was accepted";
  }
}

}  // namespace
}  // namespace st
