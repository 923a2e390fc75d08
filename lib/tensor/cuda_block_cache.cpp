// BlockCache (see cuda_block_cache.hpp).
#include "tensor/cuda_block_cache.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace st {

BlockCache::BlockCache(RawAlloc alloc, RawFree free, bool feed_memstats)
    : raw_alloc_(std::move(alloc)), raw_free_(std::move(free)), feed_(feed_memstats) {}

BlockCache::~BlockCache() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [p, l] : live_) {
    if (feed_) MemStats::add(l.cat, -int64_t(l.size));
    raw_free_(p);
  }
  for (auto& [s, p] : cached_) raw_free_(p);
}

size_t BlockCache::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20, kSmallLimit = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  const size_t q = bytes <= kSmallLimit ? kSmall : kLarge;
  return (bytes + q - 1) / q * q;
}

void* BlockCache::allocate(size_t bytes, MemCat cat) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> g(mu_);
  void* p = nullptr;
  size_t got = size;
  // Smallest cached block that fits and wastes at most a quarter of itself.
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first - size <= it->first / 4) {
    p = it->second;
    got = it->first;
    cached_.erase(it);
    ++st_.cache_hits;
  } else {
    p = raw_alloc_(size);
    if (!p && !cached_.empty()) {
      for (auto& [s, q] : cached_) {
        raw_free_(q);
        st_.reserved -= int64_t(s);
      }
      cached_.clear();
      p = raw_alloc_(size);
    }
    if (!p)
      throw_error("scaletrain", __FILE__, __LINE__,
                  detail::cat("device allocation of ", bytes, " bytes (", memcat_name(cat),
                              ") failed: ", st_.in_use, " bytes in use, ", st_.reserved,
                              " reserved, peak in use ", st_.in_use_peak));
    ++st_.raw_allocs;
    st_.reserved += int64_t(size);
    st_.reserved_peak = std::max(st_.reserved_peak, st_.reserved);
  }
  live_[p] = Live{got, cat};
  st_.in_use += int64_t(got);
  st_.in_use_peak = std::max(st_.in_use_peak, st_.in_use);
  auto& c = st_.cat_current[size_t(cat)];
  c += int64_t(got);
  st_.cat_peak[size_t(cat)] = std::max(st_.cat_peak[size_t(cat)], c);
  if (feed_) MemStats::add(cat, int64_t(got));
  return p;
}

void BlockCache::free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(p);
  ST_CHECK(it != live_.end(), "freeing a device pointer this allocator did not hand out");
  const Live l = it->second;
  live_.erase(it);
  st_.in_use -= int64_t(l.size);
  st_.cat_current[size_t(l.cat)] -= int64_t(l.size);
  if (feed_) MemStats::add(l.cat, -int64_t(l.size));
  cached_.emplace(l.size, p);
}

void BlockCache::empty_cache() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [s, p] : cached_) {
    raw_free_(p);
    st_.reserved -= int64_t(s);
  }
  cached_.clear();
}

BlockCache::Stats BlockCache::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return st_;
}

void BlockCache::reset_peaks() {
  std::lock_guard<std::mutex> g(mu_);
  st_.in_use_peak = st_.in_use;
  st_.reserved_peak = st_.reserved;
  st_.cat_peak = st_.cat_current;
}
}  // namespace st
