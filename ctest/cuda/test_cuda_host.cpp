// CPU-runnable tests of the CUDA backend's host-side parts (label unit, run
// in every build): the caching allocator's bookkeeping (st::BlockCache over
// malloc/free).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "core/error.hpp"
#include "tensor/cuda_block_cache.hpp"

namespace {
struct Counting {
  int allocs = 0, frees = 0;
  size_t fail_above = size_t(-1);  // simulate out-of-memory
  std::set<void*> live;
};

st::BlockCache make_cache(Counting& c) {
  return st::BlockCache(
      [&c](size_t n) -> void* {
        if (n > c.fail_above) return nullptr;
        ++c.allocs;
        void* p = std::malloc(n);
        c.live.insert(p);
        return p;
      },
      [&c](void* p) {
        ++c.frees;
        c.live.erase(p);
        std::free(p);
      });
}

TEST(BlockCache, RoundsSizes) {
  EXPECT_EQ(st::BlockCache::round_size(0), 512u);
  EXPECT_EQ(st::BlockCache::round_size(1), 512u);
  EXPECT_EQ(st::BlockCache::round_size(513), 1024u);
  EXPECT_EQ(st::BlockCache::round_size(1u << 20), 1u << 20);
  EXPECT_EQ(st::BlockCache::round_size((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(st::BlockCache::round_size(5u << 20), 6u << 20);
}

TEST(BlockCache, ReusesFreedBlocksAndCountsBytes) {
  Counting c;
  {
    auto cache = make_cache(c);
    const int64_t g0 = st::MemStats::current(st::MemCat::Grads);
    void* a = cache.allocate(1000, st::MemCat::Grads);
    EXPECT_EQ(st::MemStats::current(st::MemCat::Grads) - g0, 1024);
    cache.free(a);
    EXPECT_EQ(st::MemStats::current(st::MemCat::Grads), g0);
    void* b = cache.allocate(900, st::MemCat::Activations);  // same 1024 class
    EXPECT_EQ(b, a);
    EXPECT_EQ(c.allocs, 1);
    auto s = cache.stats();
    EXPECT_EQ(s.cache_hits, 1);
    EXPECT_EQ(s.in_use, 1024);
    EXPECT_EQ(s.reserved, 1024);
    EXPECT_EQ(s.cat_current[size_t(st::MemCat::Activations)], 1024);
    EXPECT_EQ(s.cat_peak[size_t(st::MemCat::Grads)], 1024);
    // A much smaller request does not take a big cached block (waste > 25%).
    void* big = cache.allocate(4u << 20, st::MemCat::Other);
    cache.free(big);
    void* small = cache.allocate(1u << 20, st::MemCat::Other);
    EXPECT_NE(small, big);
    EXPECT_EQ(cache.stats().in_use_peak, 1024 + (4 << 20));
    cache.free(small);
    cache.free(b);
    cache.empty_cache();
    EXPECT_EQ(cache.stats().reserved, 0);
    EXPECT_TRUE(c.live.empty());
    EXPECT_THROW(cache.free(reinterpret_cast<void*>(0x1234)), st::Error);
  }
  EXPECT_EQ(c.allocs, c.frees);
}

TEST(BlockCache, EmptiesCacheAndRetriesOnOutOfMemory) {
  Counting c;
  auto cache = make_cache(c);
  void* a = cache.allocate(2u << 20, st::MemCat::Other);
  cache.free(a);  // cached, 2 MiB reserved
  c.fail_above = 3u << 20;
  // 6 MiB cannot be served; the cached block is released and the retry still
  // fails, with a message that says how much was in use.
  try {
    cache.allocate(6u << 20, st::MemCat::Params);
    FAIL() << "expected an out-of-memory error";
  } catch (const st::Error& e) {
    EXPECT_NE(std::string(e.what()).find("device allocation of 6291456 bytes (params) failed"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cache.stats().reserved, 0);
  EXPECT_TRUE(c.live.empty());
}

}  // namespace
