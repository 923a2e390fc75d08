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
  // Partition and pieces: cuts near multiples of ceil(n / g), moved down to a
  // row boundary of the parameter they fall in; slots of the longest part.
  for (int b = 0; b < int(buckets_.size()); ++b) {
    Bucket& bk = buckets_[size_t(b)];
    const int64_t even = (bk.n + gsize - 1) / gsize;
    std::vector<int64_t> cut(size_t(gsize) + 1, bk.n);
    cut[0] = 0;
    for (int r = 1; r < gsize; ++r) {
      int64_t t = std::min(bk.n, r * even);
      for (size_t k = 0; k < bk.members.size(); ++k) {
        const GradView& v = grads_[size_t(bk.members[k])];
        if (t >= bk.offs[k] && t < bk.offs[k] + v.n) {
          t = bk.offs[k] + (t - bk.offs[k]) / v.row * v.row;
          break;
        }
      }
      cut[size_t(r)] = std::max(cut[size_t(r) - 1], t);
    }
    bk.per_rank = 1;
    for (int r = 0; r < gsize; ++r)
      bk.per_rank = std::max(bk.per_rank, cut[size_t(r) + 1] - cut[size_t(r)]);
    bk.shard_off = shard_numel_;
    shard_numel_ += bk.per_rank;
    bk.flat = Tensor({bk.per_rank * gsize}, MemCat::Comm);
    if (o.reduce_scatter) bk.flat.release();  // only while the bucket is in flight
    for (int r = 0; r < gsize; ++r) {
      const int64_t lo = cut[size_t(r)], hi = cut[size_t(r) + 1];
      for (size_t k = 0; k < bk.members.size(); ++k) {
        const int i = bk.members[k];
        bucket_of_[size_t(i)] = b;
        const int64_t a = std::max(lo, bk.offs[k]),
                      e = std::min(hi, bk.offs[k] + grads_[size_t(i)].n);
        if (a >= e) continue;
        bk.segs.push_back({i, a - bk.offs[k], e - a, r * bk.per_rank + (a - lo)});
        if (r == me) pieces_.push_back({i, a - bk.offs[k], e - a, bk.shard_off + (a - lo), b});
      }
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
  if (!b.flat.allocated()) b.flat.allocate();  // zeroed: the padding sums to 0
  float* dst = b.flat.data();
  for (const BucketSeg& sg : b.segs)
    std::memcpy(dst + sg.flat_off, grads_[size_t(sg.param)].g + sg.param_off,
                size_t(sg.len) * sizeof(float));
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
      if (comm_->size() == 1) std::memcpy(sh, b.flat.data(), size_t(b.per_rank) * sizeof(float));
      for (int64_t j = 0; j < b.per_rank; ++j) sh[j] *= s;
      b.flat.release();
      continue;
    }
    const float* src = b.flat.data();
    for (const BucketSeg& sg : b.segs) {
      const float* x = src + sg.flat_off;
      float* g = grads_[size_t(sg.param)].g + sg.param_off;
      for (int64_t j = 0; j < sg.len; ++j) g[j] = x[j] * s;
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
  const bool was = b.flat.allocated();
  if (!was) b.flat.allocate();
  if (comm_->size() == 1) {
    std::memcpy(b.flat.data(), shard + b.shard_off, size_t(b.per_rank) * sizeof(float));
  } else {
    std::vector<float> mine(shard + b.shard_off, shard + b.shard_off + b.per_rank);
    comm_->all_gather(mine.data(), b.flat.data(), b.per_rank);
  }
  for (const BucketSeg& sg : b.segs)
    std::memcpy(dst[size_t(sg.param)] + sg.param_off, b.flat.data() + sg.flat_off,
                size_t(sg.len) * sizeof(float));
  if (!was) b.flat.release();
}

std::vector<LayerBucket> plan_layer_buckets(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                            int64_t cap_elems) {
  ST_CHECK(ranges.size() >= 2, "plan_layer_buckets: need the embedding and head ranges, got ",
           ranges.size());
  for (size_t i = 1; i < ranges.size(); ++i)
    ST_CHECK(ranges[i].first == ranges[i - 1].first + ranges[i - 1].second,
             "plan_layer_buckets: layer ", int(i) - 1, " starts at ", ranges[i].first,
             ", not where layer ", int(i) - 2, " ends (",
             ranges[i - 1].first + ranges[i - 1].second, ")");
  const int64_t cap = std::max<int64_t>(1, cap_elems);
  std::vector<LayerBucket> out;
  LayerBucket cur;
  bool open = false;
  for (int i = int(ranges.size()) - 1; i >= 0; --i) {  // backward order
    const auto [off, n] = ranges[size_t(i)];
    if (!open) cur = LayerBucket{off + n, 0, 0};
    open = true;
    cur.off = off;
    cur.n += n;
    cur.close_layer = i - 1;
    if (cur.n >= cap || i == 0) {
      out.push_back(cur);
      open = false;
    }
  }
  return out;
}
}  // namespace st
