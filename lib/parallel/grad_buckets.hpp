// Gradient buckets of parallel.dp_bucket_mb over the gradient group (dp x cp):
// the gradients of consecutive parameters, in reverse order as backward
// produces them, are packed into flat buckets. A bucket's collective starts
// as soon as every gradient in it is final (grad_ready, called from the
// model's hook during the last micro-batch's backward) and all earlier
// buckets have started (every rank launches them in the same order), so the
// reduction overlaps the rest of backward. finish() waits for the tail; the
// seconds it waited are the exposed (non-overlapped) communication.
//
// Two modes: all-reduce (ZeRO 0/1: every rank gets the whole averaged
// gradient back in place) and reduce-scatter (ZeRO 2/3: each rank keeps only
// its shard). Partition for ZeRO (per bucket, as Megatron's distributed
// optimizer, with row-aligned cuts): the n_b elements of bucket b are cut
// into g consecutive parts near multiples of ceil(n_b / g), each cut moved
// down to a row boundary of the parameter it falls in (GradView::row); every
// part sits in a slot of s_b = the longest part's length, zero-padded, so the
// flat buffer is g equal slots (what reduce-scatter and all-gather need). The
// rank's shard is the concatenation of its slots of every bucket; pieces()
// maps it back onto (parameter, offset) ranges for the optimizer, checkpoints
// and the ZeRO-3 parameter gather. Row alignment makes every piece whole rows
// of its parameter's block: a rectangle of the global tensor even when tensor
// parallelism splits the columns, so a checkpoint saves it as one hyperslab.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/tensor.hpp"

namespace st {

struct GradView {
  float* g;  // gradient (may be re-pointed with set_grad after a reallocation)
  int64_t n;
  int group = 0;    // e.g. the layer; buckets never span groups when split_groups
  int64_t row = 1;  // elements per row (dim 0 index) of the tensor; shard cuts fall on rows
};

struct BucketOptions {
  double bucket_mb = 25.0;
  bool reduce_scatter = false;  // ZeRO 2/3: keep only this rank's shard
  bool split_groups = false;    // ZeRO 3: a bucket holds one group (layer) only
  float scale = 1.0f;           // multiplies the sum (1/dp for the mean)
};

// A contiguous part of parameter `param` in a bucket's flat (slotted) buffer.
struct BucketSeg {
  int param;
  int64_t param_off, len;
  int64_t flat_off;  // position in the bucket's flat buffer (rank r's slot: [r*s_b, (r+1)*s_b))
};

// A contiguous part of parameter `param` that this rank's shard holds (whole
// rows of it).
struct ShardPiece {
  int param;
  int64_t param_off;  // first element within the parameter (flat)
  int64_t len;
  int64_t shard_off;  // where it sits in the rank's shard
  int bucket;
};

class GradBuckets {
 public:
  // `grads` in parameter order. `comm` is the gradient group.
  GradBuckets(std::vector<GradView> grads, const BucketOptions& o, Communicator* comm);

  void start();            // a new step's reduction: nothing launched yet
  void grad_ready(int i);  // parameter i's gradient is final for this step
  void poll();             // let in-flight collectives progress (MPI needs calls)
  // Launches what is left, waits for all and unpacks: all-reduce mode writes
  // the scaled sum back into every gradient; reduce-scatter mode into
  // shard_grads(). Returns the seconds spent waiting (exposed time).
  double finish();
  // start(), every gradient ready (reverse order), finish(): for a model
  // without hooks.
  double reduce_all();

  // Seconds the last step's bucket collectives were in flight (launch to
  // observed completion), the "total" to set against finish()'s exposed time.
  double async_seconds() const { return async_s_; }
  int num_buckets() const { return int(buckets_.size()); }
  int bucket_of(int param) const { return bucket_of_[size_t(param)]; }
  int bucket_group(int b) const { return buckets_[size_t(b)].group; }
  // Bucket b's layout: where each part of its parameters sits in its flat
  // buffer, and its slot size s_b (at shard_off in every rank's shard).
  const std::vector<BucketSeg>& bucket_segments(int b) const { return buckets_[size_t(b)].segs; }
  int64_t bucket_per_rank(int b) const { return buckets_[size_t(b)].per_rank; }
  int64_t bucket_shard_off(int b) const { return buckets_[size_t(b)].shard_off; }
  int64_t param_numel(int i) const { return grads_[size_t(i)].n; }
  void set_grad(int i, float* g);

  // ZeRO partition (defined in every mode).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  int64_t shard_numel() const { return shard_numel_; }
  float* shard_grads() { return shard_grads_.data(); }  // reduce-scatter mode only
  // Fills every parameter of bucket b from the shards of all ranks: rank r's
  // part comes from `shard` (its own shard buffer, shard_off coordinates).
  // `dst[i]` is parameter i's full buffer. Collective over the group.
  void all_gather_bucket(int b, const float* shard, const std::vector<float*>& dst);
  // Copies this rank's parts of the parameters into `shard` (shard_off coordinates).
  void pack_shard(const std::vector<const float*>& src, float* shard) const;

 private:
  struct Bucket {
    std::vector<int> members;     // parameter indices, in bucket order
    std::vector<int64_t> offs;    // offset of each member in the bucket (unpadded)
    std::vector<BucketSeg> segs;  // members cut at the rank boundaries, in slot layout
    int64_t n = 0, per_rank = 0, shard_off = 0;
    int group = 0;
    int ready = 0;
    bool launched = false, done = false;
    double t_launch = 0;
    Tensor flat;  // padded to per_rank * group size, MemCat::Comm (reduce-scatter
                  // mode: allocated at launch, freed once reduced)
    CommHandle h;
  };
  void launch(Bucket& b);
  std::vector<GradView> grads_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<ShardPiece> pieces_;
  int64_t shard_numel_ = 0;
  Tensor shard_grads_;  // MemCat::Grads, reduce-scatter mode
  BucketOptions opt_;
  Communicator* comm_;
  int next_launch_ = 0;
  double async_s_ = 0;
};

// Buckets for a flat gradient buffer in which each layer's gradients are one
// contiguous range and layers are stored in forward order (embedding, blocks,
// head), so that backward finishes them from the end of the buffer towards
// its start (the CUDA engine's layout). ranges[layer + 1] = {offset, length}
// for layer -1 (embedding) .. n_layers (final norm + head); every range
// starts where the previous one ends. Consecutive layers in backward order
// join one bucket until it holds at least cap_elems elements; the last
// bucket takes what is left. A bucket is launched once its lowest layer
// (close_layer) has its gradients. Throws if the ranges are not contiguous.
struct LayerBucket {
  int64_t off = 0, n = 0;  // range of the flat buffer
  int close_layer = 0;     // the last layer backward finishes in it
};
std::vector<LayerBucket> plan_layer_buckets(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                            int64_t cap_elems);
}  // namespace st
