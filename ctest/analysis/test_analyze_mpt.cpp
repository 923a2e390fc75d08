// The `mpt` command recomputes MFU and HFU of all 216 published MPT rows
// within 0.05 points (the published tables in analysis/reference/).
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "analyze/cli.hpp"

TEST(AnalyzeMpt, PublishedRowsWithin005Points) {
  const char* src = std::getenv("SCALETRAIN_SOURCE_DIR");
  const std::string a = std::string(src ? src : ".") + "/analysis/reference";
  std::ostringstream out;
  double wm = 1, wh = 1;
  int rc =
      st::analysis::mpt_check(a + "/mpt_benchmarks.csv", a + "/mpt_models.csv", "", out, wm, wh);
  EXPECT_EQ(rc, 0) << out.str();
  EXPECT_LT(wm, 0.05);
  EXPECT_LT(wh, 0.05);
  EXPECT_NE(out.str().find("216 rows"), std::string::npos) << out.str();
  std::cout << out.str();
}
