// Implementation of grad_buckets.hpp.
#include "parallel/grad_buckets.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace st {

GradBuckets::GradBuckets(std::vector<FlatParam> params, std::vector<int64_t> seg_len,
                         const BucketOptions& o, Communicator& comm, Backend& be)
    : params_(std::move(params)), opt_(o), comm_(comm), be_(be), grads_(seg_len.size(), nullptr) {
  const int64_t cap = std::max<int64_t>(1, int64_t(o.bucket_mb * 1024 * 1024 / sizeof(float)));
  const int gsize = comm_.size(), me = comm_.rank();
  const int np = int(params_.size());
  for (int i = 0; i < np; ++i) {
    const FlatParam& p = params_[size_t(i)];
    ST_CHECK(p.seg >= 0 && p.seg < int(seg_len.size()) && p.off + p.n <= seg_len[size_t(p.seg)],
             "gradient buckets: parameter ", i, " is outside its segment");
    if (i > 0 && params_[size_t(i - 1)].seg == p.seg)
      ST_CHECK(p.off >= params_[size_t(i - 1)].off + params_[size_t(i - 1)].n,
               "gradient buckets: parameter ", i, " overlaps the previous one");
  }
  // The end of parameter i's range in its segment, its padding included.
  auto end_of = [&](int i) {
    const FlatParam& p = params_[size_t(i)];
    return i + 1 < np && params_[size_t(i + 1)].seg == p.seg ? params_[size_t(i + 1)].off
                                                             : seg_len[size_t(p.seg)];
  };
  bucket_of_.assign(params_.size(), -1);
  // Backward produces the last parameters first: fill buckets in reverse.
  Bucket cur;
  auto close = [&] {
    if (cur.members.empty()) return;
    std::reverse(cur.members.begin(), cur.members.end());
    buckets_.push_back(std::move(cur));
    cur = Bucket{};
  };
  for (int i = np - 1; i >= 0; --i) {
    const FlatParam& p = params_[size_t(i)];
    const int64_t len = end_of(i) - p.off;
    if (!cur.members.empty() && (cur.hi - cur.lo + len > cap || p.seg != cur.seg ||
                                 (o.split_groups && p.group != cur.group)))
      close();
    if (cur.members.empty()) {
      cur.group = p.group;
      cur.seg = p.seg;
      cur.hi = end_of(i);
    }
    cur.members.push_back(i);
    cur.lo = p.off;
  }
  close();
  // Partition: cuts near multiples of ceil(len / g), moved down to a row
  // boundary of the parameter they fall in.
  for (int b = 0; b < int(buckets_.size()); ++b) {
    Bucket& bk = buckets_[size_t(b)];
    const int64_t len = bk.hi - bk.lo, even = (len + gsize - 1) / gsize;
    std::vector<int64_t> cut(size_t(gsize) + 1, bk.hi);
    cut[0] = bk.lo;
    for (int r = 1; r < gsize; ++r) {
      int64_t t = std::min(bk.hi, bk.lo + r * even);
      for (int i : bk.members) {
        const FlatParam& p = params_[size_t(i)];
        if (t >= p.off && t < p.off + p.n) {
          t = p.off + (t - p.off) / p.row * p.row;
          break;
        }
      }
      cut[size_t(r)] = std::max(cut[size_t(r) - 1], t);
    }
    for (int r = 0; r < gsize; ++r) bk.counts.push_back(cut[size_t(r) + 1] - cut[size_t(r)]);
    bk.part_lo = cut[size_t(me)];
    bk.shard_off = shard_numel_;
    shard_numel_ += bk.counts[size_t(me)];
    const int64_t lo = cut[size_t(me)], hi = cut[size_t(me) + 1];
    for (int i : bk.members) {
      bucket_of_[size_t(i)] = b;
      const FlatParam& p = params_[size_t(i)];
      const int64_t a = std::max(lo, p.off), e = std::min(hi, p.off + p.n);
      if (a < e) pieces_.push_back({i, a - p.off, e - a, bk.shard_off + (a - lo), b});
    }
  }
  if (o.reduce_scatter) {
    shard_grads_ =
        Tensor({std::max<int64_t>(shard_numel_, 1)}, DType::F32, MemCat::Grads, be_.device());
    shard_grads_.zero();  // parts' padding is never written by the reduction's consumers
  }
}

void GradBuckets::start() {
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
    b.h = CommHandle();
  }
  next_launch_ = 0;
}

void GradBuckets::launch(Bucket& b) {
  float* base = grads_[size_t(b.seg)];
  ST_CHECK(base != nullptr, "gradient buckets: no gradient buffer set for segment ", b.seg);
  Stream& s = be_.device().compute_stream();
  Ops& ops = be_.ops();
  const int64_t len = b.hi - b.lo;
  const int me = comm_.rank();
  float* src = base + b.lo;
  b.launched = true;
  if (opt_.reduce_dtype == DType::F32) {
    if (opt_.reduce_scatter)
      b.h = comm_.reduce_scatter(src, shard_grads_.data() + b.shard_off, b.counts, DType::F32, s);
    else
      b.h = comm_.all_reduce(src, len, DType::F32, ReduceOp::Sum, s);
    return;
  }
  const DType w = opt_.reduce_dtype;
  b.wire = Tensor({len}, w, MemCat::Comm, be_.device());
  ops.cast(s, src, DType::F32, b.wire.raw(), w, len);
  if (opt_.reduce_scatter) {
    b.wire_recv =
        Tensor({std::max<int64_t>(b.counts[size_t(me)], 1)}, w, MemCat::Comm, be_.device());
    b.h = comm_.reduce_scatter(b.wire.raw(), b.wire_recv.raw(), b.counts, w, s);
  } else {
    b.h = comm_.all_reduce(b.wire.raw(), len, w, ReduceOp::Sum, s);
  }
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
  for (int k = 0; k < next_launch_; ++k) buckets_[size_t(k)].h.test();
}

void GradBuckets::finish() {
  for (; next_launch_ < int(buckets_.size()); ++next_launch_)
    launch(buckets_[size_t(next_launch_)]);
  Stream& s = be_.device().compute_stream();
  Ops& ops = be_.ops();
  const int me = comm_.rank();
  for (auto& b : buckets_) {
    b.h.wait(s);
    if (opt_.reduce_dtype == DType::F32) continue;
    if (opt_.reduce_scatter)
      ops.cast(s, b.wire_recv.raw(), opt_.reduce_dtype, shard_grads_.data() + b.shard_off,
               DType::F32, b.counts[size_t(me)]);
    else
      ops.cast(s, b.wire.raw(), opt_.reduce_dtype, grads_[size_t(b.seg)] + b.lo, DType::F32,
               b.hi - b.lo);
    b.wire = Tensor();  // freed in compute-stream order, after the wait
    b.wire_recv = Tensor();
  }
}

void GradBuckets::reduce_all() {
  start();
  for (int i = int(params_.size()) - 1; i >= 0; --i) grad_ready(i);
  finish();
}

double GradBuckets::async_seconds() {
  double s = 0;
  for (auto& b : buckets_) s += b.h.seconds();
  return s;
}

CommHandle GradBuckets::all_gather_bucket(int bi, void* base, DType t) {
  const Bucket& b = buckets_[size_t(bi)];
  const size_t es = dtype_size(t);
  char* p = static_cast<char*>(base);
  return all_gather_bucket(bi, p + size_t(b.part_lo) * es, p + size_t(b.lo) * es, t);
}

CommHandle GradBuckets::all_gather_bucket(int bi, const void* part, void* dst, DType t) {
  const Bucket& b = buckets_[size_t(bi)];
  return comm_.all_gather(part, dst, b.counts, t, be_.device().compute_stream());
}
}  // namespace st
