// Launch geometry and shape limits of the CUDA kernels (label cuda-host):
// the grids and shared-memory sizes attention.cu launches with, the limits
// it checks, and CudaBackend::supports() refusing at start-up, naming the
// keys, what those kernels would otherwise throw mid-step.
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "kernels/cuda/host/launch_limits.hpp"
#include "kernels/cuda/host/supports.hpp"

namespace {
using namespace st::cuda_host;

TEST(LaunchLimits, AttentionGridsCoverEveryRowOnce) {
  // 7B-like per rank: B=1, T=4096, 32 query heads, 8 key heads, hd=128.
  const AttnLaunch l = attention_launch(1, 4096, 4096, 32, 8, 128);
  EXPECT_EQ(l.fwd.x * kAttnRows, 4096);
  EXPECT_EQ(l.fwd.y, 32);
  EXPECT_EQ(l.bwd_dq.y, 32);
  EXPECT_EQ(l.bwd_dkdv.y, 8);  // one block row per key head
  EXPECT_EQ(l.fwd.threads, 128);
  // A ragged tail gets its own block.
  EXPECT_EQ(attention_launch(2, 9, 17, 4, 2, 64).fwd.x, 2);
  EXPECT_EQ(attention_launch(2, 9, 17, 4, 2, 64).bwd_dkdv.x, 3);
  EXPECT_EQ(attention_launch(2, 9, 17, 4, 2, 64).fwd.y, 8);
}

TEST(LaunchLimits, SharedMemoryMatchesTheKernelsCarving) {
  // k_fwd: Q rows (fp32) + K and V tiles (bf16 pairs, hd/2 + 1 per row).
  EXPECT_EQ(attn_tile_bytes(128), size_t(32 * 65 * 4));
  EXPECT_EQ(attn_rows_bytes(128), size_t(8 * 128 * 4));
  const AttnLaunch l = attention_launch(1, 64, 64, 4, 4, 256);
  EXPECT_EQ(l.fwd.smem, 2 * size_t(32 * 129 * 4) + size_t(8 * 256 * 4));
  // k_bwd_dkdv adds three fp32 per tile row (lse, D, and positions as int).
  EXPECT_EQ(l.bwd_dkdv.smem, 2 * size_t(32 * 129 * 4) + 2 * size_t(8 * 256 * 4) + 3 * 32 * 4);
  // hd=256 is above the default 48 KiB (an opt-in), within every supported GPU's.
  EXPECT_GT(l.bwd_dkdv.smem, size_t(48) << 10);
  EXPECT_EQ(attention_limits(1, 64, 64, 4, 4, 256), "");
  EXPECT_NE(attention_limits(1, 64, 64, 4, 4, 256, size_t(48) << 10).find("shared memory"),
            std::string::npos);
}

TEST(LaunchLimits, RefusesWhatTheBlockKernelsCannotRun) {
  EXPECT_EQ(attention_limits(4, 256, 256, 8, 2, 64), "");
  EXPECT_NE(attention_limits(4, 256, 256, 8, 2, 63).find("even head_dim of at most 256"),
            std::string::npos);
  EXPECT_NE(attention_limits(4, 256, 256, 8, 2, 258).find("head_dim 258"), std::string::npos);
  EXPECT_NE(attention_limits(8192, 256, 256, 8, 2, 64).find("8192 x 8 = 65536 exceeds"),
            std::string::npos);
  EXPECT_EQ(attention_limits(8191, 256, 256, 8, 2, 64), "");
  EXPECT_NE(attention_limits(4, 256, 256, 6, 4, 64).find("not a multiple"), std::string::npos);
}

TEST(LaunchLimits, ElementwiseGrid) {
  EXPECT_EQ(elementwise_grid(0, 256), 1u);
  EXPECT_EQ(elementwise_grid(257, 256), 2u);
  EXPECT_EQ(elementwise_grid(int64_t(1) << 40, 256), 65535u * 16);
}

TEST(SupportsShapes, RefusesAtStartUpNamingTheKeys) {
  st::Config cfg;  // the default model: d_model 512, 8 heads (hd 64), 2 kv heads
  EXPECT_EQ(supports_shapes(cfg), "");
  cfg.model.d_model = 2560;  // hd 320
  const std::string why = supports_shapes(cfg);
  EXPECT_NE(why.find("model.d_model=2560"), std::string::npos) << why;
  EXPECT_NE(why.find("head_dim 320"), std::string::npos) << why;
  cfg.model.d_model = 512;
  cfg.train.micro_batch = 8192;  // x 8 heads = 65536 blocks in y
  EXPECT_NE(supports_shapes(cfg).find("train.micro_batch=8192"), std::string::npos);
  cfg.parallel.tp = 2;  // 4 heads per rank
  EXPECT_EQ(supports_shapes(cfg), "");
}
}  // namespace
