// The pinned staging ring's bookkeeping (label cuda-host): uploads through
// kernels/cuda/host/staging_ring.hpp with tokens the test completes the way
// a stream does (in order). No slot handed out may overlap bytes an
// unfinished upload still reads; finished uploads are reclaimed without a
// wait; a wait happens only when the ring wraps onto unfinished bytes.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.hpp"
#include "kernels/cuda/host/staging_ring.hpp"

namespace {
using st::cuda_host::split_chunks;
using st::cuda_host::StagingRing;

// A stream whose DMAs finish in order: tokens below `finished` are done.
struct FakeStream {
  int next = 0, finished = 0, waits = 0;
  std::multiset<int> recycled;
  auto done() {
    return [this](int t) { return t < finished; };
  }
  auto wait() {
    return [this](int t) {
      ++waits;
      finished = std::max(finished, t + 1);
    };
  }
  auto recycle() {
    return [this](int t) { recycled.insert(t); };
  }
};

TEST(StagingRing, SplitsUploadsIntoChunks) {
  const auto v = split_chunks(20, 8);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[2], (std::pair<size_t, size_t>{16, 4}));
  EXPECT_TRUE(split_chunks(0, 8).empty());
}

TEST(StagingRing, ReclaimsFinishedSlotsWithoutWaiting) {
  StagingRing<int> ring(1024);
  FakeStream s;
  for (int i = 0; i < 12; ++i) {  // 12 x 256 bytes: three trips round the ring
    s.finished = s.next;          // every earlier DMA is done by now
    const size_t at = ring.take(200, s.done(), s.wait(), s.recycle());
    EXPECT_EQ(at, size_t(i % 4) * 256);  // rounded to 256, wrapping at 1024
    ring.hold(at, 200, s.next++);
  }
  EXPECT_EQ(s.waits, 0);
  EXPECT_EQ(s.recycled.size(), 11u);  // all but the last; each token handed back once
}

TEST(StagingRing, WaitsOnlyForTheUploadsStillReadingTheSlot) {
  StagingRing<int> ring(1024);
  FakeStream s;  // nothing finishes unless waited for
  for (int i = 0; i < 4; ++i)
    ring.hold(ring.take(256, s.done(), s.wait(), s.recycle()), 256, s.next++);
  EXPECT_EQ(s.waits, 0);
  // The ring is full: the next slot (offset 0) needs upload 0 finished, and only it.
  EXPECT_EQ(ring.take(256, s.done(), s.wait(), s.recycle()), 0u);
  EXPECT_EQ(s.waits, 1);
  EXPECT_EQ(s.finished, 1);
  ring.hold(0, 256, s.next++);
  // A slot of 600 bytes (768 once rounded) fits from the head at 256 to the
  // end, bytes uploads 1, 2 and 3 still read: all three are waited for.
  EXPECT_EQ(ring.take(600, s.done(), s.wait(), s.recycle()), 256u);
  EXPECT_EQ(s.finished, 4);
  EXPECT_EQ(s.waits, 4);
}

TEST(StagingRing, NoSlotOverlapsAnUnfinishedUpload) {
  std::mt19937 rng(3);
  StagingRing<int> ring(size_t(32) << 10, 256);
  FakeStream s;
  std::vector<std::pair<size_t, size_t>> where;  // per token
  for (int i = 0; i < 2000; ++i) {
    if (rng() % 3 == 0) s.finished = std::max(s.finished, s.next - int(rng() % 6));
    const size_t n = 1 + rng() % (size_t(12) << 10);
    const size_t at = ring.take(n, s.done(), s.wait(), s.recycle());
    ASSERT_LE(at + n, ring.capacity());
    for (int t = s.finished; t < s.next; ++t) {
      const auto [o, l] = where[size_t(t)];
      ASSERT_FALSE(o < at + n && at < o + l)
          << "slot " << at << "+" << n << " overlaps upload " << t << " at " << o << "+" << l;
    }
    ring.hold(at, n, s.next++);
    where.emplace_back(at, n);
  }
  EXPECT_GT(s.waits, 0);
  EXPECT_THROW(ring.take(ring.capacity() + 1, s.done(), s.wait(), s.recycle()), st::Error);
}
}  // namespace
