// The trainer under an address-space limit (`ulimit -v`, RLIMIT_AS), as
// sites set it: every start records a step on the recording backend (the
// host-memory check, the prediction, --dry-run), whose addresses are
// arithmetic, so a 7B dry run and a 2-rank tiny run start under 8 GB of
// address space, and a model beyond a 4 GB limit is refused with exit 2
// naming the GiB a rank needs, the limit and its value (no internal check).
// Each command runs through `bash -c 'ulimit -v N; ...'`, which limits the
// launcher and every rank it starts.
#include <gtest/gtest.h>

#include <filesystem>

#include "run_util.hpp"

namespace st::test {
namespace {

RunResult limited(long kib, const std::string& cmd) {
  return run_cmd("bash -c 'ulimit -v " + std::to_string(kib) + " && exec " + cmd + "'");
}

std::string config(const std::string& preset) {
  return " --config " + src_dir() + "/configs/models/" + preset + ".yaml";
}

bool cuda_library_built() {
  // The CUDA backend library sits beside the project's libraries.
  namespace fs = std::filesystem;
  const fs::path b = fs::path(bin()).parent_path().parent_path() / "lib";
  return fs::exists(b / "libscaletrain_cuda.so");
}

TEST(AddressLimit, DryRunOf7BUnder8GB) {
  for (const std::string device : {"cpu", "cuda"}) {
    SCOPED_TRACE(device);
    if (device == "cuda" && !cuda_library_built()) continue;  // a CPU-only build
    const RunResult r =
        limited(8000000, bin() + config("llama-7b") + " --set runtime.device=" + device +
                             " --set train.precision=bf16 --dry-run");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("check failed"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("# recorded calls per step"), std::string::npos) << r.output;
  }
}

TEST(AddressLimit, TwoRankTinyRunUnder8GB) {
  const std::string out = fresh_dir("ulimit-tiny");
  const RunResult r = limited(8000000, mpiexec() + " --oversubscribe --bind-to none -n 2 " + bin() +
                                           config("tiny") +
                                           " --set train.steps=2 --set runtime.cpu_peak_gflops=50" +
                                           " --out " + out + "/run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/run/telemetry/rank_00001.jsonl")) << r.output;
  std::filesystem::remove_all(out);
}

TEST(AddressLimit, ModelBeyondTheLimitIsRefusedWithItsSize) {
  const std::string out = fresh_dir("ulimit-big");
  const RunResult r = limited(4000000, bin() + config("llama-7b") +
                                           " --set train.steps=2 --set runtime.cpu_peak_gflops=50" +
                                           " --out " + out + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* s : {"not enough memory", "rank 0 needs about", "GiB", "RLIMIT_AS",
                        "ulimit -v 4000000 KiB", "Raise the limit"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " not in:\n" << r.output;
  EXPECT_EQ(r.output.find("check failed"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/run/run.json")) << "run.json was written";
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace st::test
