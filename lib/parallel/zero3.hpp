// ZeRO-3 parameter gather: under stage 3 every rank keeps only its shard of
// the master weights (fp32, or bf16 with optim.state_dtype=bf16) (the per-bucket partition of
// grad_buckets.hpp, the one ZeRO-1/2 use for optimizer state; buckets never span two layers), and
// no compute-dtype copy of it: a gather casts its part when it starts. A layer's full compute
// weights exist only while the model uses it: acquire(layer) has the model allocate the layer's
// buffer and all-gathers its buckets into it over the dp x cp group (one equal-count all-gather per
// bucket into a staging buffer, unpacked into the layer's buffer: GradBuckets::start_gather),
// release(layer) frees it again. prefetch(layer) starts the gather of a layer that will be needed
// next, so it overlaps the current layer's compute; acquire() then only makes the compute stream
// wait for it.
//
// Every rank of the group must call prefetch/acquire in the same order (they
// are collectives): the engine drives them from the model's layer hooks,
// which fire in the same sequence on every rank of the group.
#pragma once
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "model/model.hpp"
#include "parallel/grad_buckets.hpp"
#include "tensor/interval.hpp"

namespace st {

class Model;

class ParamGather {
 public:
  // `shard` is the rank's master shard of dtype shard_t (shard_off
  // coordinates of `bk`); a gather casts its part to the compute dtype t
  // (sends it as it is when the dtypes agree) when it starts, so no
  // compute-dtype copy of the shard is kept.
  ParamGather(GradBuckets& bk, Model& model, const void* shard, DType shard_t, DType t);
  ~ParamGather();

  // Starts the all-gather of `layer` unless it is in flight or resident; a
  // layer with no parameters on this rank is ignored.
  void prefetch(int layer);
  // Makes `layer`'s weights resident for the compute stream; `backward`:
  // for a backward pass (its wait is counted as the backward's).
  void acquire(int layer, bool backward);
  // Frees `layer`'s weights. Deferred by one acquire: released weights that
  // are asked for again at once (forward of the head then its backward,
  // recomputation then backward of a block) are reused, not gathered twice.
  void release(int layer);
  // Completes every gather in flight and frees every resident layer. Call
  // before the shard changes (optimizer step).
  void drain();
  // Seconds the compute stream waited for gathers since the last call
  // (after a synchronisation), inside forward and inside backward passes
  // (StepMeasured's fwd and bwd).
  StepMeasured take_wait_seconds();
  bool has_layer(int layer) const { return buckets_of_.count(layer) != 0; }

 private:
  void start(int layer);
  void free_layer(int layer);
  GradBuckets& bk_;
  Model& model_;
  const char* shard_;
  DType shard_t_, t_;
  std::map<int, std::vector<int>> buckets_of_;  // layer -> bucket indices
  std::map<int, std::vector<BucketGather>> inflight_;
  std::vector<int> resident_;
  int pending_release_ = kNone;
  static constexpr int kNone = -1000000;
  // the compute stream's waits for gathers, each with whether a backward pass waited
  std::vector<std::pair<StreamInterval, bool>> waits_;
};
}  // namespace st
