// Implementation of grad_buckets.hpp.
#include "parallel/grad_buckets.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st {

GradBuckets::GradBuckets(std::vector<GradView> grads, const BucketOptions& o, Communicator* comm)
    : grads_(std::move(grads)), opt_(o), comm_(comm) {
  const int64_t cap = std::max<int64_t>(1, int64_t(o.bucket_mb * 1024 * 1024 / sizeof(float)));
  const int gsize = comm_->size(), me = comm_->rank();
  bucket_of_.assign(grads_.size(), -1);
  Bucket cur;
  auto close = [&] {
    if (cur.members.empty()) return;
    buckets_.push_back(std::move(cur));
    cur = Bucket{};
  };
  // Backward produces the last parameters first: fill buckets in reverse.
  for (int i = int(grads_.size()) - 1; i >= 0; --i) {
    const GradView& v = grads_[size_t(i)];
    if (!cur.members.empty() && (cur.n + v.n > cap || (o.split_groups && v.group != cur.group)))
      close();
    if (cur.members.empty()) cur.group = v.group;
    cur.members.push_back(i);
    cur.offs.push_back(cur.n);
    cur.n += v.n;
  }
  close();
  // Partition and pieces.
  for (int b = 0; b < int(buckets_.size()); ++b) {
    Bucket& bk = buckets_[size_t(b)];
    bk.per_rank = (bk.n + gsize - 1) / gsize;
    bk.shard_off = shard_numel_;
    shard_numel_ += bk.per_rank;
    bk.flat = Tensor({bk.per_rank * gsize}, MemCat::Comm);
    const int64_t lo = me * bk.per_rank, hi = std::min(bk.n, lo + bk.per_rank);
    for (size_t k = 0; k < bk.members.size(); ++k) {
      const int i = bk.members[k];
      bucket_of_[size_t(i)] = b;
      const int64_t a = std::max(lo, bk.offs[k]),
                    e = std::min(hi, bk.offs[k] + grads_[size_t(i)].n);
      if (a < e) pieces_.push_back({i, a - bk.offs[k], e - a, bk.shard_off + (a - lo), b});
    }
  }
  if (o.reduce_scatter) shard_grads_ = Tensor({std::max<int64_t>(shard_numel_, 1)}, MemCat::Grads);
}

void GradBuckets::set_grad(int i, float* g) { grads_[size_t(i)].g = g; }

void GradBuckets::start() {
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
    b.done = false;
  }
  next_launch_ = 0;
  async_s_ = 0;
}

void GradBuckets::launch(Bucket& b) {
  float* dst = b.flat.data();
  for (size_t k = 0; k < b.members.size(); ++k) {
    const GradView& v = grads_[size_t(b.members[k])];
    std::memcpy(dst + b.offs[k], v.g, size_t(v.n) * sizeof(float));
  }
  b.launched = true;
  b.t_launch = wall_time();
  if (comm_->size() == 1) {
    b.done = true;
    return;
  }
  if (opt_.reduce_scatter)
    b.h = comm_->reduce_scatter_sum_async(b.flat.data(), shard_grads_.data() + b.shard_off,
                                          b.per_rank);
  else
    b.h = comm_->all_reduce_sum_async(b.flat.data(), b.flat.numel());
}

void GradBuckets::grad_ready(int i) {
  Bucket& b = buckets_[size_t(bucket_of_[size_t(i)])];
  ++b.ready;
  // Launch in bucket order only, so every rank issues the same sequence.
  while (next_launch_ < int(buckets_.size())) {
    Bucket& nb = buckets_[size_t(next_launch_)];
    if (nb.ready < int(nb.members.size())) break;
    launch(nb);
    ++next_launch_;
  }
  poll();
}

void GradBuckets::poll() {
  for (int k = 0; k < next_launch_; ++k) {
    Bucket& b = buckets_[size_t(k)];
    if (!b.done && b.h.test()) {
      b.done = true;
      async_s_ += wall_time() - b.t_launch;
    }
  }
}

double GradBuckets::finish() {
  for (; next_launch_ < int(buckets_.size()); ++next_launch_)
    launch(buckets_[size_t(next_launch_)]);
  const double t0 = wall_time();
  for (auto& b : buckets_) {
    if (b.done) continue;
    b.h.wait();
    b.done = true;
    async_s_ += wall_time() - b.t_launch;
  }
  const double waited = wall_time() - t0;
  const float s = opt_.scale;
  for (auto& b : buckets_) {
    if (opt_.reduce_scatter) {
      float* sh = shard_grads_.data() + b.shard_off;
      if (comm_->size() == 1) std::memcpy(sh, b.flat.data(), size_t(b.n) * sizeof(float));
      for (int64_t j = 0; j < b.per_rank; ++j) sh[j] *= s;
      continue;
    }
    const float* src = b.flat.data();
    for (size_t k = 0; k < b.members.size(); ++k) {
      const GradView& v = grads_[size_t(b.members[k])];
      const float* x = src + b.offs[k];
      for (int64_t j = 0; j < v.n; ++j) v.g[j] = x[j] * s;
    }
  }
  return waited;
}

double GradBuckets::reduce_all() {
  start();
  for (int i = int(grads_.size()) - 1; i >= 0; --i) grad_ready(i);
  return finish();
}

void GradBuckets::pack_shard(const std::vector<const float*>& src, float* shard) const {
  for (const ShardPiece& p : pieces_)
    std::memcpy(shard + p.shard_off, src[size_t(p.param)] + p.param_off,
                size_t(p.len) * sizeof(float));
}

void GradBuckets::all_gather_bucket(int bi, const float* shard, const std::vector<float*>& dst) {
  Bucket& b = buckets_[size_t(bi)];
  if (comm_->size() == 1) {
    std::memcpy(b.flat.data(), shard + b.shard_off, size_t(b.n) * sizeof(float));
  } else {
    std::vector<float> mine(shard + b.shard_off, shard + b.shard_off + b.per_rank);
    comm_->all_gather(mine.data(), b.flat.data(), b.per_rank);
  }
  for (size_t k = 0; k < b.members.size(); ++k) {
    const int i = b.members[k];
    std::memcpy(dst[size_t(i)], b.flat.data() + b.offs[k],
                size_t(grads_[size_t(i)].n) * sizeof(float));
  }
}
}  // namespace st
