// The bookkeeping of the pinned staging ring behind CudaDevice::
// copy_from_host (kernels/cuda/device.cpp): which bytes of the ring a new
// upload may take, and which earlier uploads (each marked by a completion
// token, a CUDA event there) must finish first. Header-only, compiled
// without nvcc, and tested on CPUs with tokens a test completes (label
// cuda-host): no slot handed out overlaps bytes a DMA may still read.
#pragma once
#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace st::cuda_host {

// Pieces of at most `chunk` bytes covering [0, bytes): (offset, length).
inline std::vector<std::pair<size_t, size_t>> split_chunks(size_t bytes, size_t chunk) {
  std::vector<std::pair<size_t, size_t>> v;
  for (size_t off = 0; off < bytes; off += chunk)
    v.emplace_back(off, bytes - off < chunk ? bytes - off : chunk);
  return v;
}

template <typename Token>
class StagingRing {
 public:
  struct Use {
    size_t off, len;
    Token token;  // completes when the DMA reading [off, off + len) is done
  };
  explicit StagingRing(size_t capacity, size_t align = 256) : cap_(capacity), align_(align) {}

  // A slot of n bytes (rounded up to the alignment) at the ring's head,
  // wrapping to 0 when the tail is too short. First the uses whose token is
  // done(token) are dropped, oldest first; then, while the slot overlaps a
  // use, the oldest use is waited for (wait(token)) and dropped. Dropped
  // tokens go to recycle(token). The caller then hold()s the slot.
  template <class Done, class Wait, class Recycle>
  size_t take(size_t n, Done done, Wait wait, Recycle recycle) {
    n = (n + align_ - 1) / align_ * align_;
    ST_CHECK(n > 0 && n <= cap_, "staging ring: a slot of ", n, " bytes in a ring of ", cap_);
    if (head_ + n > cap_) head_ = 0;
    const size_t lo = head_, hi = head_ + n;
    while (!busy_.empty() && done(busy_.front().token)) drop_front(recycle);
    auto overlaps = [&] {
      for (const Use& u : busy_)
        if (u.off < hi && lo < u.off + u.len) return true;
      return false;
    };
    while (overlaps()) {
      wait(busy_.front().token);
      drop_front(recycle);
    }
    head_ = hi;
    return lo;
  }
  void hold(size_t off, size_t len, Token t) { busy_.push_back({off, len, std::move(t)}); }
  const std::deque<Use>& in_use() const { return busy_; }
  size_t capacity() const { return cap_; }

 private:
  template <class Recycle>
  void drop_front(Recycle& recycle) {
    recycle(std::move(busy_.front().token));
    busy_.pop_front();
  }
  size_t cap_, align_;
  size_t head_ = 0;
  std::deque<Use> busy_;
};
}  // namespace st::cuda_host
