// Bad input never crashes and is never accepted silently: each config, CLI
// line and data file below makes scaletrain exit with status 2 and a message
// that names the culprit (key, value, file) and what would be valid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "run_util.hpp"

using namespace st::test;
namespace fs = std::filesystem;

namespace {
struct Case {
  const char* name;
  int ranks;
  std::string args;                 // after --config tiny (unless it has its own --config)
  std::vector<std::string> expect;  // substrings of the message
};

std::string tiny() { return " --config " + src_dir() + "/configs/models/tiny.yaml"; }

void write_bytes(const std::string& path, const std::vector<uint16_t>& v, size_t extra_bytes = 0) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 2));
  for (size_t i = 0; i < extra_bytes; ++i) o.put('x');
}
}  // namespace

TEST(BadInput, EachIsRefusedWithAClearMessage) {
  const std::string d = fresh_dir("bad");
  // Data files: a good one, a truncated one (odd byte count), one whose
  // sidecar promises more tokens than it holds, one with ids >= vocab_size.
  std::vector<uint16_t> ok(5000);
  for (size_t i = 0; i < ok.size(); ++i) ok[i] = uint16_t(i % 200);
  write_bytes(d + "/odd.bin", ok, 1);
  write_bytes(d + "/short.bin", ok);
  std::ofstream(d + "/short.bin.json") << R"({"dtype":"uint16","vocab_size":256,"n_tokens":9000})";
  std::vector<uint16_t> big = ok;
  big[1234] = 300;
  write_bytes(d + "/bigid.bin", big);
  std::ofstream(d + "/unknown.yaml") << "train:\n  stpes: 10\n";
  std::ofstream(d + "/syntax.yaml") << "train:\n  steps: [1, 2\n  micro_batch: 2\n";
  std::ofstream(d + "/shapes.yaml") << "model:\n  preset: tiny\n  n_heads: 5\n";
  fs::create_directories(d + "/ro");

  const std::string data = " --set data.source=file --set data.path=";
  std::vector<Case> cases = {
      {"unknown key in file",
       1,
       " --config " + d + "/unknown.yaml",
       {"train.stpes", "train.steps"}},
      {"unknown key in --set",
       1,
       tiny() + " --set optim.learning_rate=1",
       {"optim.learning_rate", "did you mean", "lr"}},
      {"wrong type", 1, tiny() + " --set train.steps=abc", {"train.steps", "abc"}},
      {"out of range", 1, tiny() + " --set optim.lr=-1", {"optim.lr", "-1"}},
      {"bad enum", 1, tiny() + " --set train.act_ckpt=sometimes", {"train.act_ckpt", "selective"}},
      {"inconsistent shapes", 1, " --config " + d + "/shapes.yaml", {"n_heads", "5"}},
      {"kv heads above heads", 1, tiny() + " --set model.n_kv_heads=8", {"n_kv_heads"}},
      {"malformed override", 1, tiny() + " --set train.steps", {"train.steps", "="}},
      {"missing config file", 1, " --config " + d + "/nope.yaml", {"nope.yaml"}},
      {"yaml syntax error", 1, " --config " + d + "/syntax.yaml", {"syntax.yaml"}},
      {"unknown CLI flag", 1, tiny() + " --bogus", {"bogus"}},
      {"missing data file", 2, tiny() + data + d + "/missing.bin", {"missing.bin"}},
      {"truncated data file", 1, tiny() + data + d + "/odd.bin", {"odd.bin", "truncated"}},
      {"data shorter than its sidecar", 1, tiny() + data + d + "/short.bin", {"short.bin", "9000"}},
      {"token id above vocab",
       1,
       tiny() + data + d + "/bigid.bin",
       {"bigid.bin", "300", "vocab_size"}},
      {"file source without path", 1, tiny() + " --set data.source=file", {"data.path"}},
      {"world size not matching layout", 2, tiny() + " --set parallel.dp=4", {"world size", "2"}},
      {"zero3 with pp",
       2,
       tiny() + " --set parallel.zero_stage=3 --set parallel.pp=2",
       {"parallel.zero_stage=3", "parallel.pp=2"}},
      {"strict device on cuda",
       1,
       tiny() + " --set runtime.device=cuda --set runtime.strict_device=true",
       {"runtime.strict_device=true", "runtime.device=cpu"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = run_scaletrain(c.ranks, c.args + " --set runtime.cpu_peak_gflops=1 --out " + d +
                                         "/run-" + std::to_string(&c - cases.data()));
    EXPECT_EQ(r.term_signal, 0) << "crashed: " << r.output;
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const auto& e : c.expect)
      EXPECT_NE(r.output.find(e), std::string::npos) << "message should name '" << e << "':\n"
                                                     << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  }
  fs::remove_all(d);
}

// runtime.device=cuda where it cannot run (a build without the CUDA backend,
// or no visible GPU) stops every rank at start-up with exit 2 and the reason,
// before any run folder content is written. Where a GPU is visible the same
// command trains (and says so in run.json).
TEST(BadInput, CudaWithoutAGpuIsRefusedOnEveryRank) {
  const std::string d = fresh_dir("nocuda");
  for (int ranks : {1, 2}) {
    const std::string out = d + "/run-np" + std::to_string(ranks);
    auto r =
        run_scaletrain(ranks, tiny() + " --set runtime.device=cuda --set train.precision=bf16" +
                                  " --set train.steps=2 --out " + out);
    EXPECT_EQ(r.term_signal, 0) << "crashed: " << r.output;
    if (r.exit_code == 0) {  // a GPU machine
      std::ifstream rj(out + "/run.json");
      EXPECT_EQ(nlohmann::json::parse(rj)["device"]["kind"], "cuda") << r.output;
      continue;
    }
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("runtime.device=cuda"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("runtime.device=cpu"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out + "/run.json")) << "nothing is written before the check";
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  }
  fs::remove_all(d);
}

// The CUDA backend is a library loaded at run time: a missing or broken one
// is a one-line error naming it, exit 2, on every rank; and what the backend
// cannot run of a config is its answer, not a list in the config code.
TEST(BadInput, CudaBackendLibraryMissingOrBroken) {
  const std::string d = fresh_dir("backend");
  fs::create_directories(d + "/empty");
  fs::create_directories(d + "/broken");
  std::ofstream(d + "/broken/libscaletrain_cuda.so") << "not an ELF file\n";
  const std::string args = tiny() + " --set runtime.device=cuda --set train.precision=bf16";
  for (int ranks : {1, 2}) {
    auto r = run_cmd("SCALETRAIN_BACKEND_DIR=" + d + "/empty " +
                     (ranks > 1 ? mpiexec() + " --oversubscribe -n 2 " : std::string()) + bin() +
                     args + " --out " + d + "/r1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(d + "/empty/libscaletrain_cuda.so"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
    auto b = run_cmd("SCALETRAIN_BACKEND_DIR=" + d + "/broken " +
                     (ranks > 1 ? mpiexec() + " --oversubscribe -n 2 " : std::string()) + bin() +
                     args + " --out " + d + "/r2");
    EXPECT_EQ(b.exit_code, 2) << b.output;
    EXPECT_NE(b.output.find("cannot load the CUDA backend library"), std::string::npos) << b.output;
    EXPECT_NE(b.output.find(d + "/broken/libscaletrain_cuda.so"), std::string::npos) << b.output;
    for (auto* x : {&r, &b}) EXPECT_EQ(x->output.find("terminate called"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(d + "/r1/run.json"));
  // With the real library (a CUDA build): fp32 is the backend's refusal.
  const std::string lib = env_or("SCALETRAIN_BUILD_DIR", ".") + "/lib/libscaletrain_cuda.so";
  if (fs::exists(lib)) {
    auto f = run_scaletrain(
        1, tiny() + " --set runtime.device=cuda --set train.precision=fp32 " + "--dry-run");
    EXPECT_EQ(f.exit_code, 2) << f.output;
    EXPECT_NE(f.output.find("train.precision=fp32"), std::string::npos) << f.output;
    EXPECT_NE(f.output.find("train.precision=bf16"), std::string::npos) << f.output;
  }
  fs::remove_all(d);
}
