// docs/config.md must be exactly what the generator (the schema) produces, so
// the reference never drifts from the code. Fix: cmake --build BUILD --target config-doc
#include <fstream>
#include <sstream>

#include "scaletrain/build_config.hpp"
#include "test_util.hpp"

namespace st {
namespace {

TEST(ConfigDoc, DocsConfigMdIsUpToDate) {
  const std::string path = std::string(SCALETRAIN_SOURCE_DIR) + "/docs/config.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << "; run: cmake --build BUILD --target config-doc";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_TRUE(ss.str() == config_reference_markdown())
      << "docs/config.md is out of date with lib/config/schema.cpp; run: cmake --build BUILD "
         "--target config-doc";
}

TEST(ConfigDoc, EveryKeyIsDocumented) {
  std::string md = config_reference_markdown();
  for (const char* k :
       {"model.n_layers", "parallel.zero_stage", "train.act_ckpt", "optim.grad_clip", "data.dtype",
        "checkpoint.on_error", "runtime.timeout_s"})
    EXPECT_NE(md.find(std::string("`") + k + "`"), std::string::npos) << k;
}

}  // namespace
}  // namespace st
