// train.precision=auto on CPU ranks: the ranks agree on bf16 exactly when
// this CPU's oneDNN bf16 matmul runs in hardware (the test asks the kernels
// itself), fall back to fp32 when oneDNN is held below its bf16 instruction
// set (DNNL_MAX_CPU_ISA), and choose fp32 for all when only some ranks have
// it; run.json records the resolved precision and why, and the report shows
// it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_kernels.hpp"
#include "run_util.hpp"

namespace {
using namespace st::test;
namespace k = st::kernels;

std::string tiny_args(const std::string& dir) {
  return " --config " + src_dir() + "/configs/models/tiny.yaml" +
         " --set train.steps=3 --set train.precision=auto --out " + dir;
}

nlohmann::json run_json(const std::string& dir) {
  std::ifstream f(dir + "/run.json");
  return nlohmann::json::parse(f);
}

std::string report_of(const std::string& dir) {
  const auto r = run_cmd(env_or("SCALETRAIN_ANALYZE", "scaletrain-analyze") + " run " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir + "/analysis/report.md");
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(PrecisionAuto, FollowsTheCpusBf16Gemm) {
  const std::string dir = fresh_dir("prec-auto") + "/run";
  const auto r = run_scaletrain(2, tiny_args(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = run_json(dir);
  const std::string want = k::gemm_bf16_native() ? "bf16" : "fp32";
  EXPECT_EQ(j["device"]["precision"], want) << k::gemm_bf16_library();
  EXPECT_EQ(j["config"]["train"]["precision"], want);
  const std::string why = j["device"]["precision_choice"];
  EXPECT_EQ(why.rfind("auto: ", 0), 0u) << why;
  EXPECT_NE(why.find(k::gemm_bf16_native() ? "multiplies bf16 in hardware" : "no native bf16"),
            std::string::npos)
      << why;
  EXPECT_NE(r.output.find("train.precision: " + want + " (auto: "), std::string::npos) << r.output;
  EXPECT_NE(report_of(dir).find("| precision / act ckpt / sharding | " + want + " (auto: "),
            std::string::npos);
}

TEST(PrecisionAuto, Fp32BelowTheBf16InstructionSet) {
  const std::string dir = fresh_dir("prec-avx2") + "/run";
  const auto r =
      run_cmd("DNNL_MAX_CPU_ISA=AVX512_CORE " + mpiexec() +
              " --oversubscribe --bind-to none -x DNNL_MAX_CPU_ISA -n 2 " + bin() + tiny_args(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = run_json(dir);
  EXPECT_EQ(j["device"]["precision"], "fp32");
  const std::string why = j["device"]["precision_choice"];
  EXPECT_NE(why.find("no native bf16 GEMM"), std::string::npos) << why;
}

TEST(PrecisionAuto, AllRanksAgreeOnFp32WhenOneLacksIt) {
  if (!k::gemm_bf16_native())
    GTEST_SKIP() << "this CPU has no native bf16 GEMM: " << k::gemm_bf16_library();
  const std::string dir = fresh_dir("prec-mixed") + "/run";
  // Rank 0 has the bf16 instructions, rank 1 is held below them.
  const auto r =
      run_cmd(mpiexec() + " --oversubscribe --bind-to none -n 1 " + bin() + tiny_args(dir) +
              " : -n 1 -x DNNL_MAX_CPU_ISA=AVX512_CORE " + bin() + tiny_args(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = run_json(dir);
  EXPECT_EQ(j["device"]["precision"], "fp32");
  const std::string why = j["device"]["precision_choice"];
  EXPECT_NE(why.find("not every rank"), std::string::npos) << why;
}

TEST(PrecisionAuto, AnUnknownPrecisionNamesTheChoices) {
  const auto r = run_scaletrain(
      1, " --config " + src_dir() + "/configs/models/tiny.yaml --set train.precision=fp16");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.precision"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("auto"), std::string::npos) << r.output;
}
}  // namespace
