// The campaign drivers ask the planner before submitting: a weak-scaling
// job of llama-7b with ZeRO 0 on 8 x H100 80GB (predicted ~129 GiB per GPU)
// is refused with its predicted peak and the nearest feasible layout as
// --set overrides, nothing is printed for sbatch; --force prints the sbatch
// lines anyway; the docs' example (docs/campaigns.md, with the layout the
// planner names) passes. Runs the drivers with --dry-run: no Slurm needed.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "e2e/run_util.hpp"

namespace {
using st::test::env_or;
using st::test::run_cmd;

std::string driver(const std::string& args) {
  const std::string src = env_or("SCALETRAIN_SOURCE_DIR", ".");
  const std::string plan = env_or("SCALETRAIN_BUILD_DIR", ".") + "/analysis/scaletrain-plan";
  return "SCALETRAIN_PLAN=" + plan + " " + src + "/slurm/campaigns/weak_scaling.sh " + args;
}
const char* kExample =
    "--nodes 1,2 --gpus-per-node 8 --model llama-7b --micro-batch 1 --steps 50 "
    "--dry-run";
}  // namespace

TEST(CampaignGuard, RefusesPredictedOomAndNamesTheNearestFeasibleLayout) {
  const auto r = run_cmd(driver(kExample));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("plan_guard: refusing n1-r0008: dp8 tp1 pp1 cp1 ZeRO 0"),
            std::string::npos)
      << r.output;
  std::smatch m;
  const std::regex peak("predicted peak ([0-9.]+) GiB per device, ([0-9.]+) GiB available");
  ASSERT_TRUE(std::regex_search(r.output, m, peak)) << r.output;
  EXPECT_GT(std::stod(m[1]), std::stod(m[2]));
  EXPECT_NE(r.output.find("nearest feasible layout: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("overrides: --set parallel.tp="), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("sbatch "), std::string::npos) << "nothing may be submitted\n"
                                                         << r.output;
}

TEST(CampaignGuard, ForceSubmitsAnywayAndTheDocsExampleFits) {
  const auto f = run_cmd(driver(std::string(kExample) + " --force"));
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("submitting n1-r0008 anyway (--force)"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("sbatch --parsable"), std::string::npos) << f.output;
  // docs/campaigns.md's example: the same campaign with ZeRO 1.
  const auto d = run_cmd(driver(std::string(kExample) + " --set parallel.zero_stage=1"));
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("plan_guard: n1-r0008 fits"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("plan_guard: n2-r0016 fits"), std::string::npos) << d.output;
}

// Every job runs with the cluster file the planner checked it against
// (runtime.cluster), so its run.json prediction, report and plots price
// with the file that describes where it runs and name it (issue 56).
TEST(CampaignGuard, JobsGetTheClusterFileThePlannerChecked) {
  const std::string fits = std::string(kExample) + " --set parallel.zero_stage=1";
  auto r = run_cmd(driver(fits));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t jobs = 0;
  for (size_t at = r.output.find("slurm/scaletrain.sbatch"); at != std::string::npos;
       at = r.output.find("slurm/scaletrain.sbatch", at + 1), ++jobs) {
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_NE(line.find("--set runtime.cluster=configs/clusters/h100-sxm-80gb.yaml"),
              std::string::npos)
        << line;
  }
  EXPECT_EQ(jobs, 2u) << r.output;
  r = run_cmd(driver(fits + " --cluster configs/clusters/a100-sxm-80gb.yaml --force"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--set runtime.cluster=configs/clusters/a100-sxm-80gb.yaml"),
            std::string::npos)
      << r.output;
}
