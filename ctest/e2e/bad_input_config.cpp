// Bad-input rows, part 1: the config file, --set overrides and the command
// line. Every row is refused at start-up with exit 2 and a message naming
// the key, the value and what would be valid; nothing is trained.
#include "bad_input.hpp"

namespace st::test::bad {
namespace {

std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A row that loads `yaml` (none when empty) with `sets` on `ranks` ranks.
Case cfg(std::string name, std::string yaml, std::vector<std::string> sets,
         std::vector<std::string> expect, int ranks = 1) {
  Case c;
  c.name = std::move(name);
  c.expect = std::move(expect);
  c.command = [yaml, sets, ranks](Ctx& x) {
    std::string args;
    if (!yaml.empty()) {
      put(x.dir + "/c.yaml", yaml);
      args += " --config " + x.dir + "/c.yaml";
    }
    for (const auto& s : sets) args += " --set " + q(s);
    return trainer(ranks, args + " --out " + x.dir + "/run");
  };
  // Refused before the run folder is made.
  c.check = [](Ctx& x, const RunResult&) {
    return std::filesystem::exists(x.dir + "/run/run.json") ? "run.json was written" : "";
  };
  return c;
}

// A row with a raw command line after the program name.
Case cli(std::string name, std::string args, std::vector<std::string> expect, int ranks = 1) {
  Case c;
  c.name = std::move(name);
  c.expect = std::move(expect);
  c.command = [args, ranks](Ctx& x) { return trainer(ranks, args + " --out " + x.dir + "/run"); };
  return c;
}

}  // namespace

std::vector<Case> config_cases() {
  return {
      cfg("unknown key in file", "train:\n  stpes: 10\n", {},
          {"train.stpes", "did you mean 'train.steps'", ":2"}),
      cfg("unknown section", "trian: {steps: 1}\n", {}, {"'trian'", "did you mean 'train'"}),
      cfg("unknown key in --set", "", {"optim.learning_rat=1"}, {"optim.learning_rat", "--set"}),
      cfg("unknown key in --set, far from any", "", {"optim.learning_rate=1"},
          {"optim.learning_rate", "valid keys in optim", "lr"}),
      cfg("wrong type int", "train:\n  steps: abc\n", {}, {"train.steps", "'abc'", "not an int"}),
      cfg("wrong type float", "", {"optim.lr=fast"}, {"optim.lr", "'fast'", "float"}),
      cfg("wrong type bool", "", {"parallel.sp=maybe"},
          {"parallel.sp", "'maybe'", "true or false"}),
      cfg("int given a float", "", {"train.steps=1.5"}, {"train.steps", "'1.5'", "int"}),
      cfg("map for a scalar", "train: {steps: {a: 1}}\n", {},
          {"train.steps", "expected a single int"}),
      cfg("out of range", "train: {steps: -5}\n", {}, {"train.steps", "-5", "[1, 1000000000]"}),
      cfg("out of range float", "", {"optim.beta2=1.5"}, {"optim.beta2", "1.5", "[0, 0.999999]"}),
      cfg("negative lr", "", {"optim.lr=-1"}, {"optim.lr", "-1"}),
      cfg("zero stage range", "", {"parallel.zero_stage=4"},
          {"parallel.zero_stage", "4", "[0, 3]"}),
      cfg("keep_last_n zero", "", {"checkpoint.keep_last_n=0"}, {"checkpoint.keep_last_n", "[1,"}),
      cfg("int overflow", "", {"model.d_model=99999999999999999999"},
          {"model.d_model", "out of range"}),
      cfg("bad enum", "optim: {schedule: cosin}\n", {},
          {"optim.schedule", "'cosin'", "constant|linear|cosine", "did you mean 'cosine'"}),
      cfg("bad enum act_ckpt", "", {"train.act_ckpt=sometimes"}, {"train.act_ckpt", "selective"}),
      cfg("bad enum state_dtype", "", {"optim.state_dtype=fp16"},
          {"optim.state_dtype", "'fp16'", "bf16"}),
      cfg("bf16 state with fp32 compute", "", {"optim.state_dtype=bf16", "train.precision=fp32"},
          {"optim.state_dtype=bf16", "train.precision=fp32", "set train.precision=bf16"}),
      cfg("bad enum device", "", {"runtime.device=gpu"}, {"runtime.device", "'gpu'", "cpu|cuda"}),
      cfg("profile_steps backwards", "", {"runtime.profile_steps=3-2"},
          {"runtime.profile_steps", "'3-2'", "ends before it starts", "valid: A-B"}, 2),
      cfg("profile_steps not steps", "", {"runtime.profile_steps=a-b"},
          {"runtime.profile_steps", "'a-b'", "not a step range", "e.g. 10-12"}),
      cfg("profile_steps after the last step", "", {"train.steps=4", "runtime.profile_steps=5-6"},
          {"runtime.profile_steps", "'5-6'", "starts after the last step (train.steps=4)"}),
      cfg("d_model not a multiple of heads", "", {"model.d_model=500"},
          {"model.d_model=500", "model.n_heads=8", "multiple of 8"}),
      cfg("inconsistent shapes in a file", "model:\n  preset: tiny\n  n_heads: 5\n", {},
          {"n_heads", "5"}),
      cfg("odd head_dim", "", {"model.d_model=24", "model.n_heads=8", "model.n_kv_heads=2"},
          {"head_dim 3", "even"}),
      cfg("kv heads above heads", "", {"model.n_kv_heads=16"},
          {"model.n_kv_heads=16", "model.n_heads=8"}),
      cfg("kv heads not a divisor", "", {"model.n_kv_heads=3"},
          {"model.n_heads=8", "model.n_kv_heads=3"}),
      cfg("heads and tp", "", {"parallel.tp=3"}, {"model.n_heads=8", "parallel.tp=3"}),
      cfg("kv heads and tp", "", {"parallel.tp=4"}, {"model.n_kv_heads=2", "parallel.tp=4"}),
      cfg("layers and pp", "", {"parallel.pp=3"},
          {"model.n_layers=8", "parallel.pp", "= 3", "multiple of 3",
           "parallel.pipeline_layers=2,3,3"}),
      cfg("pipeline split sum", "", {"parallel.pp=2", "parallel.pipeline_layers=3,3"},
          {"parallel.pipeline_layers=3,3", "sums to 6", "model.n_layers=8", "e.g. 4,4"}),
      cfg("pipeline split length", "",
          {"parallel.pp=2", "parallel.num_model_chunks=2", "train.grad_accum=2",
           "parallel.pipeline_layers=5,3"},
          {"parallel.pipeline_layers=5,3", "lists 2", "needs 4 counts", "c*pp + s"}),
      cfg("pipeline split empty chunk", "", {"parallel.pp=2", "parallel.pipeline_layers=8,0"},
          {"parallel.pipeline_layers", "'0'", "at least 1 layer"}),
      cfg("pipeline split negative", "", {"parallel.pp=2", "parallel.pipeline_layers=9,-1"},
          {"parallel.pipeline_layers", "'-1'", "at least 1 layer"}),
      cfg("pipeline split not numbers", "", {"parallel.pp=2", "parallel.pipeline_layers=four,4"},
          {"parallel.pipeline_layers", "'four'", "not a layer count", "COUNT*REPEAT"}),
      cfg("layers and chunks", "",
          {"parallel.pp=2", "parallel.num_model_chunks=3", "train.grad_accum=2"},
          {"model.n_layers=8", "num_model_chunks", "= 6"}),
      cfg("chunks need pp", "", {"parallel.num_model_chunks=2"},
          {"parallel.num_model_chunks=2", "parallel.pp > 1"}),
      cfg("seq_len and cp", "", {"parallel.cp=3"}, {"model.seq_len=256", "2*parallel.cp = 6"}),
      cfg("sp needs tp", "", {"parallel.sp=true"}, {"parallel.sp=true", "parallel.tp"}),
      cfg("file source without path", "data: {source: file}\n", {},
          {"data.source=file", "data.path"}),
      cfg("vocab beyond uint16", "",
          {"data.source=file", "data.path=x.bin", "model.vocab_size=70000", "parallel.tp=1"},
          {"model.vocab_size=70000", "data.dtype=uint32"}),
      cfg("yaml syntax", "train:\n  steps: 1\n   bad: [1, 2\n", {}, {"YAML syntax error", "line"}),
      cfg("yaml syntax names file and line", "train:\n  steps: 1\noptim: {lr: [1, 2\n", {},
          {"c.yaml", "line "}),
      cfg("override without =", "", {"train.steps"}, {"'train.steps'", "section.key=value"}),
      cfg("override without section", "", {"steps=10"}, {"'steps=10'", "section.key=value"}),
      cfg("override with empty key", "", {"train.=10"}, {"'train.=10'", "section.key=value"}),
      cfg("top-level list", "- 1\n- 2\n", {}, {"must be a map of sections"}),
      cfg("section is a scalar", "train: 5\n", {}, {"section 'train'", "must be a map"}),
      cfg("duplicate key", "train:\n  steps: 1\n  steps: 2\n", {}, {"train.steps", "twice", ":3"}),
      cfg("duplicate section", "train: {steps: 1}\ntrain: {seed: 2}\n", {}, {"'train'", "twice"}),
      cfg("run name with a slash", "", {"runtime.name=a/b"},
          {"runtime.name", "'a/b'", "without '/'"}),
      cfg("run name not UTF-8", "",
          {"runtime.name=a\xff\xfe"
           "b"},
          {"runtime.name", "a\\xFF\\xFEb", "not valid UTF-8", "byte 1"}),
      cfg("path not UTF-8", "", {"checkpoint.dir=/tmp/\xc3("},
          {"checkpoint.dir", "not valid UTF-8"}),
      cfg("unknown preset lists presets", "model: {preset: llama-7}\n", {},
          {"model.preset", "'llama-7'", "llama-70b", "tiny"}),
      // What a device can run is its backend's answer (bad_input_faults.cpp);
      // the config refuses only what no device can mean.
      cfg("strict device on cuda", "", {"runtime.device=cuda", "runtime.strict_device=true"},
          {"runtime.strict_device=true", "runtime.device=cpu", "runtime.device=cuda"}),
      cfg("bad reduce dtype", "", {"parallel.grad_reduce_dtype=fp16"},
          {"parallel.grad_reduce_dtype", "'fp16'", "fp32|bf16"}),
      cfg("layout not matching the world", "", {"parallel.dp=3", "parallel.tp=2"},
          {"= 6", "world size 4", "parallel.dp=2"}, 4),
      cfg("model parallel above the world", "", {"parallel.tp=2", "parallel.pp=2"},
          {"world size 2", "tp*pp*cp = 2*2*1 = 4"}, 2),
      cfg("zero3 with pp", "", {"parallel.zero_stage=3", "parallel.pp=2"},
          {"parallel.zero_stage=3", "parallel.pp=2"}, 2),
      cli("missing config file", " --config /nonexistent/dir/run.yaml",
          {"/nonexistent/dir/run.yaml", "not found"}),
      cli("config file is a folder", " --config /tmp", {"/tmp", "is a directory"}),
      cli("unknown CLI flag", tiny() + " --bogus", {"bogus"}),
  };
}

}  // namespace st::test::bad
