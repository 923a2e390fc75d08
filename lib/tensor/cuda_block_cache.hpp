// BlockCache: the bookkeeping of the CUDA caching device allocator, kept free
// of CUDA so it is unit-tested on any machine (ctest/cuda/test_cuda_host.cpp).
// The raw allocate/free functions are injected: cudaMalloc/cudaFree in
// kernels/cuda/device.cpp, malloc/free in the tests.
//
// Policy: sizes round up to 512 B (below 1 MiB) or 2 MiB; a freed block goes
// back to the cache and serves a later request of the same rounded size
// class, or of a size at most 25% smaller (no splitting, so no
// fragmentation bookkeeping). When the raw allocator fails, the cache is
// released and the allocation retried once. Bytes in use are tracked
// per st::MemCat (current and peak, and fed into st::MemStats), bytes
// reserved from the raw allocator separately.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "tensor/tensor.hpp"

namespace st {

class BlockCache {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // nullptr on failure
  using RawFree = std::function<void(void*)>;

  BlockCache(RawAlloc alloc, RawFree free, bool feed_memstats = true);
  ~BlockCache();  // returns everything to the raw allocator
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Throws st::Error naming the request and the cache state when even the
  // retry after emptying the cache fails.
  void* allocate(size_t bytes, MemCat cat);
  void free(void* p);
  void empty_cache();  // hand cached (unused) blocks back to the raw allocator

  static size_t round_size(size_t bytes);

  struct Stats {
    int64_t in_use = 0, in_use_peak = 0;      // bytes handed out (rounded)
    int64_t reserved = 0, reserved_peak = 0;  // bytes held from the raw allocator
    int64_t raw_allocs = 0, cache_hits = 0;
    std::array<int64_t, size_t(MemCat::kCount)> cat_current{}, cat_peak{};
  };
  Stats stats() const;
  void reset_peaks();

 private:
  struct Live {
    size_t size;
    MemCat cat;
  };
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  bool feed_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> cached_;  // size -> block
  std::unordered_map<void*, Live> live_;
  Stats st_;
};

}  // namespace st
