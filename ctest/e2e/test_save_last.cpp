// checkpoint.save_last: with checkpoints on, the last step is saved even when
// it is not a multiple of the interval (7 steps, interval 5: steps 5 and 7);
// checkpoint.save_last=false keeps only the interval's (step 5).
#include <gtest/gtest.h>

#include <filesystem>

#include "run_util.hpp"

namespace {
using namespace st::test;

bool saved(const std::string& d, const char* step) {
  return std::filesystem::is_directory(d + "/checkpoints/" + step);
}

void run_tiny(const std::string& d, const std::string& extra) {
  auto r = run_scaletrain(1, "--config " + src_dir() +
                                 "/configs/models/tiny.yaml --set train.steps=7 "
                                 "--set checkpoint.interval=5 --set checkpoint.keep_last_n=5 "
                                 "--set runtime.cpu_peak_gflops=1 --set checkpoint.probe_mb=0 " +
                                 extra + " --out " + d);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}
}  // namespace

TEST(SaveLast, LastStepIsCheckpointedUnlessTurnedOff) {
  const std::string d = fresh_dir("save-last");
  run_tiny(d, "");
  EXPECT_TRUE(saved(d, "step_00000005"));
  EXPECT_TRUE(saved(d, "step_00000007"));
  const std::string e = fresh_dir("save-last-off");
  run_tiny(e, "--set checkpoint.save_last=false");
  EXPECT_TRUE(saved(e, "step_00000005"));
  EXPECT_FALSE(saved(e, "step_00000007"));
  std::filesystem::remove_all(d);
  std::filesystem::remove_all(e);
}
