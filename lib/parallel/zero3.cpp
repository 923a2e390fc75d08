// Implementation of zero3.hpp. Gathers are all-gathers of the bucket parts
// through the gradient group's communicator, ordered after the compute
// stream; in acquire() the compute stream waits for a layer's gathers and
// unpacks them into the layer's weights.
#include "parallel/zero3.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "model/model.hpp"

namespace st {

ParamGather::ParamGather(GradBuckets& bk, Model& model, const void* shard, DType shard_t, DType t)
    : bk_(bk), model_(model), shard_(static_cast<const char*>(shard)), shard_t_(shard_t), t_(t) {
  for (int b = 0; b < bk_.num_buckets(); ++b) buckets_of_[bk_.bucket_group(b)].push_back(b);
}

ParamGather::~ParamGather() {
  // Gathers still in flight must finish before their buffers go away.
  for (auto& [layer, gs] : inflight_)
    for (auto& g : gs) g.h.wait();
}

void ParamGather::start(int layer) {
  model_.allocate_layer_weights(layer);
  auto& hs = inflight_[layer];
  for (int b : buckets_of_.at(layer))
    hs.push_back(bk_.start_gather(b,
                                  shard_ + size_t(bk_.bucket_shard_off(b)) * dtype_size(shard_t_),
                                  shard_t_, model_.weights_at(bk_.bucket_lo(b)), t_));
}

void ParamGather::prefetch(int layer) {
  if (!has_layer(layer) || inflight_.count(layer) ||
      std::find(resident_.begin(), resident_.end(), layer) != resident_.end() ||
      layer == pending_release_)
    return;
  start(layer);
}

void ParamGather::free_layer(int layer) {
  model_.release_layer_weights(layer);
  resident_.erase(std::remove(resident_.begin(), resident_.end(), layer), resident_.end());
}

void ParamGather::acquire(int layer, bool backward) {
  if (!has_layer(layer)) return;
  if (pending_release_ != kNone) {
    const int p = pending_release_;
    pending_release_ = kNone;
    if (p == layer) return;  // still resident: reuse
    free_layer(p);
  }
  if (std::find(resident_.begin(), resident_.end(), layer) != resident_.end()) return;
  if (!inflight_.count(layer)) start(layer);
  Device& dev = model_.backend().device();
  Stream& s = dev.compute_stream();
  StreamInterval w(dev);
  w.begin(s);
  for (auto& g : inflight_.at(layer)) bk_.finish_gather(g);
  w.end(s);
  waits_.emplace_back(std::move(w), backward);
  inflight_.erase(layer);
  resident_.push_back(layer);
}

void ParamGather::release(int layer) {
  if (!has_layer(layer)) return;
  if (pending_release_ != kNone && pending_release_ != layer) free_layer(pending_release_);
  pending_release_ = layer;
}

void ParamGather::drain() {
  for (auto& [layer, gs] : inflight_) {
    for (auto& g : gs) bk_.finish_gather(g);
    resident_.push_back(layer);  // allocated: freed below, in stream order
  }
  inflight_.clear();
  pending_release_ = kNone;
  while (!resident_.empty()) free_layer(resident_.back());
}

StepMeasured ParamGather::take_wait_seconds() {
  StepMeasured t;
  for (auto& [w, backward] : waits_) (backward ? t.bwd : t.fwd) += w.seconds();
  waits_.clear();
  return t;
}
}  // namespace st
