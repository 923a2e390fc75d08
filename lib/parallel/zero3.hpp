// ZeRO-3 parameter gather: under stage 3 every rank keeps only its shard of
// the fp32 master weights (the per-bucket partition of grad_buckets.hpp, the
// one ZeRO-1/2 use for optimizer state; buckets never span two layers). A
// layer's full weights exist only while the model uses it: acquire(layer)
// all-gathers its buckets over the dp x cp group into the parameters' buffers
// (allocated then), release(layer) frees them again. prefetch(layer) starts
// the non-blocking all-gather of a layer that will be needed next, so it
// overlaps the current layer's compute; acquire() then only waits for it.
//
// Every rank of the group must call prefetch/acquire in the same order (they
// are collectives): the engine drives them from the model's layer hooks,
// which fire in the same sequence on every rank of the group.
#pragma once
#include <map>
#include <vector>

#include "comm/communicator.hpp"
#include "parallel/grad_buckets.hpp"
#include "tensor/tensor.hpp"

namespace st {

class ParamGather {
 public:
  // `w[i]` is parameter i's full weight tensor (same order as the buckets'
  // gradients); `shard` the rank's master shard (shard_off coordinates of
  // `bk`, stable while gathers are in flight). `group` is the dp x cp group.
  ParamGather(const GradBuckets& bk, Communicator& group, std::vector<Tensor*> w,
              const float* shard);
  ~ParamGather();

  // Starts the all-gather of `layer` unless it is in flight or resident; a
  // layer with no parameters on this rank is ignored.
  void prefetch(int layer);
  // Makes `layer`'s weights resident (allocated and filled). Returns the
  // seconds spent waiting for communication.
  double acquire(int layer);
  // Frees `layer`'s weights. Deferred by one acquire: released weights that
  // are asked for again at once (forward of the head then its backward,
  // recomputation then backward of a block) are reused, not gathered twice.
  void release(int layer);
  // Waits for every gather in flight (their data is dropped) and frees every
  // resident layer. Call before the master shard changes (optimizer step).
  // Returns the seconds waited.
  double drain();
  // Layers with parameters here, and how many elements each holds.
  bool has_layer(int layer) const { return buckets_of_.count(layer) != 0; }

 private:
  struct InFlight {
    std::vector<Tensor> bufs;  // one per bucket, per_rank * g, MemCat::Comm
    std::vector<MPI_Request> reqs;
    double t0 = 0;
    int64_t bytes = 0;
  };
  void start(int layer);
  double finish(int layer, bool unpack);
  void free_layer(int layer);
  const GradBuckets& bk_;
  Communicator& comm_;
  MpiCommunicator* mpi_;  // null: no non-blocking all-gather, gather in acquire
  std::vector<Tensor*> w_;
  const float* shard_;
  std::map<int, std::vector<int>> buckets_of_;  // layer -> bucket indices
  std::map<int, InFlight> inflight_;
  std::vector<int> resident_;
  int pending_release_ = kNone;
  static constexpr int kNone = -1000000;
};
}  // namespace st
