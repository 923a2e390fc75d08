// Implementation of zero3.hpp. The non-blocking all-gather is MPI_Iallgather
// on the group's communicator (the Communicator interface has no async
// all-gather); waits go through MpiCommunicator::wait_request, so a dead peer
// aborts with the group named instead of hanging.
#include "parallel/zero3.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st {

ParamGather::ParamGather(const GradBuckets& bk, Communicator& group, std::vector<Tensor*> w,
                         const float* shard)
    : bk_(bk),
      comm_(group),
      mpi_(dynamic_cast<MpiCommunicator*>(&group)),
      w_(std::move(w)),
      shard_(shard) {
  for (int b = 0; b < bk_.num_buckets(); ++b) buckets_of_[bk_.bucket_group(b)].push_back(b);
}

ParamGather::~ParamGather() {
  // Requests still in flight must complete before their buffers go away.
  for (auto& [layer, f] : inflight_)
    for (auto& r : f.reqs)
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
}

void ParamGather::start(int layer) {
  InFlight& f = inflight_[layer];
  const int g = comm_.size();
  f.t0 = wall_time();
  for (int b : buckets_of_.at(layer)) {
    const int64_t n = bk_.bucket_per_rank(b);
    f.bufs.emplace_back(std::vector<int64_t>{n * g}, MemCat::Comm);
    const float* mine = shard_ + bk_.bucket_shard_off(b);
    f.bytes += n * g * int64_t(sizeof(float));
    if (g == 1) {
      std::memcpy(f.bufs.back().data(), mine, size_t(n) * sizeof(float));
    } else if (mpi_) {
      ST_CHECK(n <= INT32_MAX, "ZeRO-3 bucket part of ", n, " elements exceeds the MPI count");
      f.reqs.push_back(MPI_REQUEST_NULL);
      ST_MPI_CHECK(MPI_Iallgather(mine, int(n), MPI_FLOAT, f.bufs.back().data(), int(n), MPI_FLOAT,
                                  mpi_->mpi(), &f.reqs.back()));
    } else {
      comm_.all_gather(mine, f.bufs.back().data(), n);  // counted by the communicator
    }
  }
}

void ParamGather::prefetch(int layer) {
  if (!has_layer(layer) || inflight_.count(layer) ||
      std::find(resident_.begin(), resident_.end(), layer) != resident_.end() ||
      layer == pending_release_)
    return;
  start(layer);
}

double ParamGather::finish(int layer, bool unpack) {
  InFlight& f = inflight_.at(layer);
  const double t0 = wall_time();
  for (auto& r : f.reqs) mpi_->wait_request(&r, "ZeRO-3 parameter all_gather");
  const double waited = wall_time() - t0;
  if (mpi_ && !f.reqs.empty()) comm_.add_stat(CollKind::AllGather, f.bytes, wall_time() - f.t0);
  if (unpack) {
    const auto& bs = buckets_of_.at(layer);
    for (size_t k = 0; k < bs.size(); ++k)
      for (const BucketSeg& sg : bk_.bucket_segments(bs[k])) {
        Tensor* t = w_[size_t(sg.param)];
        if (!t->allocated()) t->allocate();
        std::memcpy(t->data() + sg.param_off, f.bufs[k].data() + sg.flat_off,
                    size_t(sg.len) * sizeof(float));
      }
    resident_.push_back(layer);
  }
  inflight_.erase(layer);
  return waited;
}

void ParamGather::free_layer(int layer) {
  for (int b : buckets_of_.at(layer))
    for (const BucketSeg& sg : bk_.bucket_segments(b)) w_[size_t(sg.param)]->release();
  resident_.erase(std::remove(resident_.begin(), resident_.end(), layer), resident_.end());
}

double ParamGather::acquire(int layer) {
  if (!has_layer(layer)) return 0;
  if (pending_release_ != kNone) {
    const int p = pending_release_;
    pending_release_ = kNone;
    if (p == layer) return 0;  // still resident: reuse
    free_layer(p);
  }
  if (std::find(resident_.begin(), resident_.end(), layer) != resident_.end()) return 0;
  if (!inflight_.count(layer)) start(layer);
  return finish(layer, true);
}

void ParamGather::release(int layer) {
  if (!has_layer(layer)) return;
  if (pending_release_ != kNone && pending_release_ != layer) free_layer(pending_release_);
  pending_release_ = layer;
}

double ParamGather::drain() {
  double waited = 0;
  while (!inflight_.empty()) waited += finish(inflight_.begin()->first, false);
  pending_release_ = kNone;
  while (!resident_.empty()) free_layer(resident_.back());
  return waited;
}
}  // namespace st
