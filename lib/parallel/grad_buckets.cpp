// Implementation of grad_buckets.hpp.
#include "parallel/grad_buckets.hpp"

#include <cstring>

#include "core/util.hpp"

namespace st {

GradBuckets::GradBuckets(std::vector<GradView> grads, double bucket_mb, Communicator* dp)
    : dp_(dp) {
  const int64_t cap = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024 / sizeof(float)));
  Bucket cur;
  int64_t fill = 0;
  // Backward produces the last parameters first: fill buckets in reverse.
  for (auto it = grads.rbegin(); it != grads.rend(); ++it) {
    if (fill > 0 && fill + it->n > cap) {
      cur.flat = Tensor({fill}, MemCat::Comm);
      buckets_.push_back(std::move(cur));
      cur = Bucket{};
      fill = 0;
    }
    cur.members.push_back(*it);
    fill += it->n;
  }
  if (fill > 0) {
    cur.flat = Tensor({fill}, MemCat::Comm);
    buckets_.push_back(std::move(cur));
  }
}

double GradBuckets::reduce_mean() {
  if (dp_->size() == 1) return 0.0;
  std::vector<CommHandle> handles;
  handles.reserve(buckets_.size());
  for (auto& b : buckets_) {
    float* dst = b.flat.data();
    for (auto& m : b.members) {
      std::memcpy(dst, m.g, size_t(m.n) * sizeof(float));
      dst += m.n;
    }
    handles.push_back(dp_->all_reduce_sum_async(b.flat.data(), b.flat.numel()));
  }
  double t0 = wall_time();
  for (auto& h : handles) h.wait();
  double waited = wall_time() - t0;
  const float inv = 1.0f / float(dp_->size());
  for (auto& b : buckets_) {
    const float* src = b.flat.data();
    for (auto& m : b.members) {
      for (int64_t i = 0; i < m.n; ++i) m.g[i] = src[i] * inv;
      src += m.n;
    }
  }
  return waited;
}
}  // namespace st
