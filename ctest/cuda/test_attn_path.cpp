// The attention path bookkeeping of the CUDA ops (label cuda-host): a shape
// refused by rule stays on the block kernels; a failed cuDNN plan is retried
// on the next forward call of the shape (not cached forever) up to
// kMaxTries; a backward call follows what its forward could use; every call
// is counted by path, per step and in total, and describe() names the
// shapes that are not on cuDNN and why.
#include <gtest/gtest.h>

#include "kernels/cuda/host/attn_path.hpp"

namespace {
using namespace st::cuda_host;
using D = AttnPathPolicy::Decision;

const AttnShape k7b{1, 4096, 32, 8, 128}, kOdd{2, 256, 8, 2, 60};

TEST(AttnPath, BuiltPlansAreUsedByBothDirections) {
  AttnPathPolicy p;
  EXPECT_EQ(p.decide(k7b, false), D::TryCudnn);
  p.plan_ok(k7b);
  EXPECT_EQ(p.decide(k7b, false), D::UseCudnn);
  EXPECT_EQ(p.decide(k7b, true), D::UseCudnn);
}

TEST(AttnPath, RuleRefusalIsForGood) {
  AttnPathPolicy p;
  p.refused(kOdd, "head dimension 60");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(p.decide(kOdd, false), D::UseBlock);
  EXPECT_NE(p.describe().find("hd=60: head dimension 60"), std::string::npos) << p.describe();
}

TEST(AttnPath, FailedPlansAreRetriedThenSettle) {
  AttnPathPolicy p;
  for (int i = 1; i < AttnPathPolicy::kMaxTries; ++i) {
    EXPECT_EQ(p.decide(k7b, false), D::TryCudnn) << "try " << i;
    EXPECT_FALSE(p.plan_failed(k7b, "no engine"));
    EXPECT_EQ(p.decide(k7b, true), D::UseBlock);  // the backward follows its forward
    EXPECT_NE(p.describe().find("plan failed " + std::to_string(i) + "x, retried"),
              std::string::npos)
        << p.describe();
  }
  EXPECT_EQ(p.decide(k7b, false), D::TryCudnn);
  EXPECT_TRUE(p.plan_failed(k7b, "no engine"));
  EXPECT_EQ(p.decide(k7b, false), D::UseBlock);
  EXPECT_NE(p.describe().find("hd=128: no engine"), std::string::npos) << p.describe();
  // A transient failure that then succeeds is used from then on.
  AttnPathPolicy q;
  q.plan_failed(k7b, "out of workspace");
  q.plan_ok(k7b);
  EXPECT_EQ(q.decide(k7b, true), D::UseCudnn);
  EXPECT_EQ(q.describe().find("not on cuDNN"), std::string::npos) << q.describe();
}

TEST(AttnPath, CountsWhatRanPerStepAndInTotal) {
  AttnPathPolicy p;
  p.ran(AttnPath::Cudnn, false);
  p.ran(AttnPath::Cudnn, true);
  p.ran(AttnPath::Block, false);
  AttnCounts step = p.take_counts();
  EXPECT_EQ(step.cudnn_fwd, 1);
  EXPECT_EQ(step.cudnn_bwd, 1);
  EXPECT_EQ(step.block_fwd, 1);
  EXPECT_EQ(step.block_bwd, 0);
  p.ran(AttnPath::Block, true);
  step = p.take_counts();
  EXPECT_EQ(step.cudnn_fwd + step.cudnn_bwd + step.block_fwd, 0);
  EXPECT_EQ(step.block_bwd, 1);
  EXPECT_EQ(p.counts().cudnn_fwd, 1);
  EXPECT_EQ(p.counts().block_bwd, 1);
  EXPECT_NE(p.describe().find("cuDNN fwd/bwd 1/1, block kernels fwd/bwd 1/1"), std::string::npos)
      << p.describe();
}

TEST(AttnPath, StepRecordNamesEachPathThatRan) {
  AttnPathPolicy p;
  for (int i = 0; i < 3; ++i) p.ran(AttnPath::Cudnn, false);
  p.ran(AttnPath::Block, false);
  p.ran(AttnPath::BlockChosen, true);
  p.ran(AttnPath::BlockChosen, true);
  const AttnCounts c = p.take_counts();
  using M = std::map<std::string, int64_t>;
  EXPECT_EQ(attn_path_names(c, false), (M{{"cudnn", 3}, {"block", 1}}));
  EXPECT_EQ(attn_path_names(c, true), (M{{"block_chosen", 2}}));  // not counted as a fallback
  EXPECT_EQ(c.block_bwd, 0);
  EXPECT_NE(p.describe().find("runtime.attention_backward=deterministic 2"), std::string::npos)
      << p.describe();
  EXPECT_TRUE(attn_path_names(p.take_counts(), true).empty());
}
}  // namespace
