// plan_layer_buckets (parallel/grad_buckets.hpp): the CUDA engine's gradient
// buckets over a flat buffer of per-layer ranges, planned on the CPU so the
// plan is tested without a GPU: every element in exactly one bucket, buckets
// in backward order, each closed by its lowest layer, sized by the cap.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.hpp"
#include "parallel/grad_buckets.hpp"

using st::LayerBucket;
using st::plan_layer_buckets;

namespace {
// Layers -1 (embedding) .. L (head) with the given sizes, stored in order.
std::vector<std::pair<int64_t, int64_t>> layout(const std::vector<int64_t>& sizes) {
  std::vector<std::pair<int64_t, int64_t>> r;
  int64_t off = 0;
  for (int64_t n : sizes) {
    r.push_back({off, n});
    off += n;
  }
  return r;
}

void expect_cover(const std::vector<LayerBucket>& b, int64_t total) {
  ASSERT_FALSE(b.empty());
  int64_t end = total;
  for (const auto& k : b) {  // backward order: from the end towards 0
    EXPECT_EQ(k.off + k.n, end);
    EXPECT_GT(k.n, 0);
    end = k.off;
  }
  EXPECT_EQ(end, 0);
  EXPECT_EQ(b.back().close_layer, -1) << "the embedding closes the last bucket";
}
}  // namespace

TEST(LayerBuckets, CapSetsTheGrouping) {
  // embedding 100, 4 blocks of 40, head 120 (layers -1, 0..3, 4).
  auto r = layout({100, 40, 40, 40, 40, 120});
  const int64_t total = 380;

  auto each = plan_layer_buckets(r, 1);  // every layer its own bucket
  expect_cover(each, total);
  ASSERT_EQ(each.size(), 6u);
  for (size_t i = 0; i < each.size(); ++i) EXPECT_EQ(each[i].close_layer, 4 - int(i));

  auto one = plan_layer_buckets(r, 1 << 20);  // one bucket for everything
  ASSERT_EQ(one.size(), 1u);
  expect_cover(one, total);

  auto mid = plan_layer_buckets(r, 80);  // head alone (120), then blocks in pairs
  expect_cover(mid, total);
  ASSERT_EQ(mid.size(), 4u);
  EXPECT_EQ(mid[0].close_layer, 4);
  EXPECT_EQ(mid[0].n, 120);
  EXPECT_EQ(mid[1].close_layer, 2);
  EXPECT_EQ(mid[1].n, 80);
  EXPECT_EQ(mid[2].close_layer, 0);
  EXPECT_EQ(mid[3].close_layer, -1);
  EXPECT_EQ(mid[3].n, 100);
}

TEST(LayerBuckets, RemainderGoesToTheLastBucket) {
  auto r = layout({8, 50, 50, 50, 10});  // small embedding below the cap
  auto b = plan_layer_buckets(r, 100);
  expect_cover(b, 168);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].close_layer, 1);  // head 10 + block 2 + block 1 = 110
  EXPECT_EQ(b[1].close_layer, -1);  // block 0 + embedding = 58 (< cap, last)
}

TEST(LayerBuckets, GapsAreRefused) {
  auto r = layout({10, 10, 10});
  r[2].first += 4;  // the head does not start where block 0 ends
  EXPECT_THROW(plan_layer_buckets(r, 16), st::Error);
  EXPECT_THROW(plan_layer_buckets({{0, 5}}, 16), st::Error);
}
