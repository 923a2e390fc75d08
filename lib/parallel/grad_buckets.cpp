// Implementation of grad_buckets.hpp.
#include "parallel/grad_buckets.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace st {

GradBuckets::GradBuckets(std::vector<FlatParam> params, std::vector<int64_t> seg_len,
                         const BucketOptions& o, Communicator& comm, Backend& be)
    : params_(std::move(params)), opt_(o), comm_(comm), be_(be), grads_(seg_len.size(), nullptr) {
  ST_CHECK(o.staging >= 1, "gradient buckets: at least one staging buffer, not ", o.staging);
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
  // Partition: equal parts of each bucket's own layout; this rank's part as
  // pieces.
  pos_.assign(params_.size(), 0);
  for (int b = 0; b < int(buckets_.size()); ++b) {
    Bucket& bk = buckets_[size_t(b)];
    place(bk, gsize);
    bk.shard_off = shard_numel_;
    shard_numel_ += bk.part;
    max_padded_ = std::max(max_padded_, gsize * bk.part);
    bk.direct = gsize * bk.part <= bk.hi - bk.lo;
    for (int i : bk.members)
      bk.direct = bk.direct && pos_[size_t(i)] == params_[size_t(i)].off - bk.lo;
    const int64_t lo = me * bk.part, hi = lo + bk.part;
    for (int i : bk.members) {
      bucket_of_[size_t(i)] = b;
      const FlatParam& p = params_[size_t(i)];
      const int64_t at = pos_[size_t(i)];
      const int64_t a = std::max(lo, at), e = std::min(hi, at + p.n);
      if (a < e) pieces_.push_back({i, a - at, e - a, bk.shard_off + (a - lo), b});
    }
  }
  if (o.reduce_scatter) {
    shard_grads_ =
        Tensor({std::max<int64_t>(shard_numel_, 1)}, DType::F32, MemCat::Grads, be_.device());
    shard_grads_.zero();
  }
}

namespace {
int64_t gcd64(int64_t a, int64_t b) {
  while (b) a %= b, std::swap(a, b);
  return a;
}
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

// The smallest part (from ceil(len / g), in steps of the alignment) for
// which the parameters, each moved forward until every cut inside it falls
// on one of its rows, fit in g parts. A parameter longer than a part spans
// several cuts: the part is then a multiple of its row, so aligning the
// first cut aligns them all; a shorter one holds at most one cut.
void GradBuckets::place(Bucket& bk, int g) {
  int64_t len = 0;
  for (int i : bk.members) len += params_[size_t(i)].n;
  int64_t part = round_up(std::max<int64_t>(1, (len + g - 1) / g), kPartAlign);
  for (;;) {
    int64_t align = kPartAlign;
    for (int i : bk.members) {
      const FlatParam& p = params_[size_t(i)];
      if (p.n > part) align = align / gcd64(align, p.row) * p.row;
    }
    ST_CHECK(align <= (int64_t(1) << 32), "gradient buckets: rows of the bucket at ", bk.lo,
             " need parts of a multiple of ", align, " elements");
    part = round_up(part, align);
    int64_t at = 0;
    for (int i : bk.members) {
      const FlatParam& p = params_[size_t(i)];
      at = round_up(at, 64);                       // as the model aligns them
      const int64_t cut = (at / part + 1) * part;  // the first cut after the start
      if (cut < at + p.n && (cut - at) % p.row != 0) at += p.row - (cut - at) % p.row;
      pos_[size_t(i)] = at;
      at += p.n;
    }
    if (at <= g * part) break;
    part += align;
  }
  bk.part = part;
}

GradBuckets::~GradBuckets() {
  // Collectives still in flight must finish before their buffers go away.
  for (auto& b : buckets_) b.h.wait();
}

void GradBuckets::start() {
  for (auto& b : buckets_) {
    b.h = CommHandle();
    b.seconds = 0;
  }
  if (opt_.reduce_scatter)
    be_.device().fill_zero(shard_grads_.raw(), size_t(shard_numel_) * sizeof(float),
                           be_.device().compute_stream());
  start_micro();
}

void GradBuckets::start_micro() {
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
  }
  next_launch_ = 0;
}

float* GradBuckets::stage(int bi) {
  Bucket& b = buckets_[size_t(bi)];
  if (!b.taken) {
    // The previous micro-batch's reduction of this bucket must have consumed
    // its buffer first.
    if (!b.retired) retire(b);
    while (staged_ >= opt_.staging) retire_oldest();
    Device& dev = be_.device();
    b.stage = Tensor({comm_.size() * b.part}, DType::F32, MemCat::Grads, dev);
    b.stage.zero();
    ++staged_;
    b.taken = true;
  }
  return b.stage.data();
}

void GradBuckets::retire_oldest() {
  ST_CHECK(!in_flight_.empty(), "gradient buckets: all ", opt_.staging,
           " staging buffers are taken by buckets that are not complete; raise "
           "parallel.dp_bucket_mb or set parallel.zero_full_grads=true");
  Bucket& b = buckets_[size_t(in_flight_.front())];
  retire(b);
}

void GradBuckets::launch(Bucket& b) {
  Device& dev = be_.device();
  Stream& s = dev.compute_stream();
  Ops& ops = be_.ops();
  const int g = comm_.size();
  const int64_t len = b.hi - b.lo;
  b.launched = true;
  b.taken = false;
  if (!opt_.reduce_scatter) {  // in place in the flat buffer
    float* base = grads_[size_t(b.seg)];
    ST_CHECK(base != nullptr, "gradient buckets: no gradient buffer set for segment ", b.seg);
    if (opt_.reduce_dtype == DType::F32) {
      b.h = comm_.all_reduce(base + b.lo, len, DType::F32, ReduceOp::Sum, s);
    } else {
      b.wire = Tensor({len}, opt_.reduce_dtype, MemCat::Comm, dev);
      ops.cast(s, base + b.lo, DType::F32, b.wire.raw(), opt_.reduce_dtype, len);
      b.h = comm_.all_reduce(b.wire.raw(), len, opt_.reduce_dtype, ReduceOp::Sum, s);
    }
    return;
  }
  if (!b.stage.allocated()) {  // flat mode: copy the bucket into staging
    if (!b.retired) retire(b);
    float* base = grads_[size_t(b.seg)];
    ST_CHECK(base != nullptr, "gradient buckets: bucket at ", b.lo, " of segment ", b.seg,
             " has neither a staging buffer nor a gradient buffer");
    float* st = stage(int(&b - buckets_.data()));  // zeroed: the padding
    b.taken = false;
    for (int i : b.members)
      dev.copy(st + pos_[size_t(i)], base + params_[size_t(i)].off,
               size_t(params_[size_t(i)].n) * sizeof(float), s);
  }
  const auto counts = equal_counts(g, b.part);
  b.retired = false;
  in_flight_.push_back(int(&b - buckets_.data()));
  if (opt_.reduce_dtype == DType::F32) {
    b.recv = Tensor({b.part}, DType::F32, MemCat::Comm, dev);
    b.h = comm_.reduce_scatter(b.stage.raw(), b.recv.raw(), counts, DType::F32, s);
    return;
  }
  const DType w = opt_.reduce_dtype;
  b.wire = Tensor({g * b.part}, w, MemCat::Comm, dev);
  ops.cast(s, b.stage.raw(), DType::F32, b.wire.raw(), w, g * b.part);
  b.stage = Tensor();  // the wire copy is what travels; freed in stream order
  --staged_;
  b.recv = Tensor({b.part}, w, MemCat::Comm, dev);
  b.h = comm_.reduce_scatter(b.wire.raw(), b.recv.raw(), counts, w, s);
}

void GradBuckets::retire(Bucket& b) {
  Stream& s = be_.device().compute_stream();
  Ops& ops = be_.ops();
  b.h.wait(s);
  b.seconds += b.h.seconds();
  float* dst = shard_grads_.data() + b.shard_off;
  if (opt_.reduce_dtype == DType::F32) {
    ops.add(s, dst, b.recv.raw(), b.part, DType::F32);
  } else {
    Tensor r32({b.part}, DType::F32, MemCat::Comm, be_.device());
    ops.cast(s, b.recv.raw(), opt_.reduce_dtype, r32.raw(), DType::F32, b.part);
    ops.add(s, dst, r32.raw(), b.part, DType::F32);
  }
  // Freed in compute-stream order: after the wait, so never while the
  // collective may still read or write them.
  if (b.stage.allocated()) {
    b.stage = Tensor();
    --staged_;
  }
  b.wire = Tensor();
  b.recv = Tensor();
  b.retired = true;
  const int me = int(&b - buckets_.data());
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), me), in_flight_.end());
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
  if (opt_.staged && next_launch_ == int(buckets_.size())) start_micro();  // the next micro-batch
  poll();
}

void GradBuckets::poll() {
  for (int k = 0; k < next_launch_; ++k) buckets_[size_t(k)].h.test();
  // Completed reductions give their staging back at once.
  while (!in_flight_.empty() && buckets_[size_t(in_flight_.front())].h.test())
    retire(buckets_[size_t(in_flight_.front())]);
}

void GradBuckets::finish() {
  ST_CHECK(!opt_.staged || next_launch_ == 0, "gradient buckets: a micro-batch's backward ended ",
           "with bucket ", next_launch_, " of ", buckets_.size(), " incomplete");
  // Staged: every micro-batch launched all of its buckets already.
  for (; !opt_.staged && next_launch_ < int(buckets_.size()); ++next_launch_)
    launch(buckets_[size_t(next_launch_)]);
  if (opt_.reduce_scatter) {
    while (!in_flight_.empty()) retire_oldest();
    return;
  }
  Stream& s = be_.device().compute_stream();
  for (auto& b : buckets_) {
    b.h.wait(s);
    b.seconds += b.h.seconds();
    if (opt_.reduce_dtype != DType::F32)
      be_.ops().cast(s, b.wire.raw(), opt_.reduce_dtype, grads_[size_t(b.seg)] + b.lo, DType::F32,
                     b.hi - b.lo);
    b.wire = Tensor();  // freed in compute-stream order, after the wait
  }
}

void GradBuckets::reduce_all() {
  start();
  for (int i = int(params_.size()) - 1; i >= 0; --i) grad_ready(i);
  finish();
}

double GradBuckets::async_seconds() {
  double s = 0;
  for (auto& b : buckets_) s += b.seconds;
  return s;
}

BucketGather GradBuckets::start_gather(int bi, const void* part, DType part_t, void* dst, DType t) {
  const Bucket& b = buckets_[size_t(bi)];
  Device& dev = be_.device();
  Stream& s = dev.compute_stream();
  const int g = comm_.size(), me = comm_.rank();
  const size_t es = dtype_size(t);
  BucketGather out;
  out.bucket = bi;
  out.dst = dst;
  out.t = t;
  if (!b.direct) out.staging = Tensor({g * b.part}, t, MemCat::Comm, dev);
  char* st = b.direct ? static_cast<char*>(dst) : static_cast<char*>(out.staging.raw());
  char* mine = st + size_t(me * b.part) * es;
  if (!part && b.direct) {  // this rank's pieces are its part already
    part = mine;
  } else if (!part) {  // in place: this rank's pieces of the bucket into its part
    for (const ShardPiece& pc : pieces_) {
      if (pc.bucket != bi) continue;
      const FlatParam& p = params_[size_t(pc.param)];
      dev.copy(mine + size_t(pc.shard_off - b.shard_off) * es,
               static_cast<const char*>(dst) + size_t(p.off - b.lo + pc.param_off) * es,
               size_t(pc.len) * es, s);
    }
    part = mine;
  } else if (part_t != t) {
    be_.ops().cast(s, part, part_t, mine, t, b.part);
    part = mine;
  }
  out.h = comm_.all_gather(part, st, equal_counts(g, b.part), t, s);
  return out;
}

void GradBuckets::finish_gather(BucketGather& gt) {
  const Bucket& b = buckets_[size_t(gt.bucket)];
  Device& dev = be_.device();
  Stream& s = dev.compute_stream();
  gt.h.wait(s);
  const size_t es = dtype_size(gt.t);
  if (b.direct) {  // gathered in place
    gt.h = CommHandle();
    return;
  }
  for (int i : b.members) {
    const FlatParam& p = params_[size_t(i)];
    dev.copy(static_cast<char*>(gt.dst) + size_t(p.off - b.lo) * es,
             static_cast<const char*>(gt.staging.raw()) + size_t(pos_[size_t(i)]) * es,
             size_t(p.n) * es, s);
  }
  gt.staging = Tensor();  // freed in compute-stream order, after the copy
  gt.h = CommHandle();
}

void GradBuckets::gather_all(const std::vector<void*>& bases, DType t) {
  const size_t es = dtype_size(t);
  // Two buckets in flight: one is copied out while the next travels.
  std::vector<BucketGather> gs(static_cast<size_t>(num_buckets()));
  for (int b = 0; b < num_buckets(); ++b) {
    const Bucket& bk = buckets_[size_t(b)];
    gs[size_t(b)] = start_gather(b, nullptr, t,
                                 static_cast<char*>(bases[size_t(bk.seg)]) + size_t(bk.lo) * es, t);
    if (b >= 1) finish_gather(gs[size_t(b) - 1]);
  }
  if (num_buckets() > 0) finish_gather(gs.back());
}
}  // namespace st
