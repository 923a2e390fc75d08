// Gradient buckets of parallel.dp_bucket_mb over the gradient group (dp x cp).
// The model keeps its gradients in one flat buffer in forward order
// (model.hpp), so consecutive parameters in backward order are one range of
// it: a bucket is a view of such a range, reduced in place (all-reduce) or
// reduce-scattered straight from it, with no copy. A bucket's collective
// starts as soon as every gradient in it is final (grad_ready, from the
// model's hook during the last micro-batch's backward) and every earlier
// bucket has started (every rank launches them in the same order), ordered
// after the compute stream, so the reduction overlaps the rest of backward.
// finish() makes the compute stream wait for the tail.
//
// Two modes: all-reduce (ZeRO 0/1: every rank gets the whole summed
// gradient back in place) and reduce-scatter (ZeRO 2/3: each rank keeps only
// its part, in shard_grads()). With reduce dtype bf16 a bucket is cast to
// bf16 for the wire and back (half the bytes). The sum is the sum: the model
// already scaled the loss gradient by 1 / (grad_accum * dp).
//
// Partition for ZeRO (per bucket, as Megatron's distributed optimizer, with
// row-aligned cuts): bucket b's range [lo, hi) is cut into g consecutive
// parts near lo + r * ceil((hi - lo) / g), each cut moved down to a row
// boundary of the parameter it falls in (a cut in alignment padding stays).
// Rank r's part is counts(b)[r] elements; the collectives take these counts
// directly. The rank's shard is the concatenation of its parts of every
// bucket; pieces() maps it back onto (parameter, offset) ranges for the
// optimizer, checkpoints and the ZeRO-3 parameter gather. Row alignment makes
// every piece whole rows of its parameter's block: a rectangle of the global
// tensor even when tensor parallelism splits the columns, so a checkpoint
// saves it as one hyperslab.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/tensor.hpp"

namespace st {

class Backend;

// A parameter as the buckets see it: where its gradient lives. Gradients
// live in one or more flat buffers (segments: one per pipeline model chunk);
// parameters come segment by segment, each in ascending offset order.
struct FlatParam {
  int seg = 0;      // which flat buffer
  int64_t off = 0;  // start in that buffer
  int64_t n = 0;    // elements (without the alignment padding after it)
  int64_t row = 1;  // elements per row (dim 0 index); shard cuts fall on rows
  int group = 0;    // e.g. the layer; buckets never span groups when split_groups
};

struct BucketOptions {
  double bucket_mb = 25.0;
  bool reduce_scatter = false;  // ZeRO 2/3: keep only this rank's part
  bool split_groups = false;    // ZeRO 3: a bucket holds one group (layer) only
  DType reduce_dtype = DType::F32;
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
  // `seg_len`: each flat buffer's length. `comm` is the gradient group.
  // Buckets never span two segments.
  GradBuckets(std::vector<FlatParam> params, std::vector<int64_t> seg_len, const BucketOptions& o,
              Communicator& comm, Backend& be);

  // Segment seg's fp32 gradient buffer (set again after it is reallocated).
  void set_buffer(int seg, float* grads) { grads_[size_t(seg)] = grads; }
  void start();            // a new step's reduction: nothing launched yet
  void grad_ready(int i);  // parameter i's gradient is final (as enqueued on the compute stream)
  void poll();             // let in-flight collectives progress (MPI needs calls)
  // Launches what is left and makes the compute stream wait for every
  // bucket (and, in bf16, for the cast back).
  void finish();
  // start(), every gradient ready (reverse order), finish().
  void reduce_all();
  // Seconds the last step's bucket collectives were in flight (launch to
  // completion, as far as known), the "total" to set against the exposed wait.
  double async_seconds();

  int num_buckets() const { return int(buckets_.size()); }
  int bucket_of(int param) const { return bucket_of_[size_t(param)]; }
  int bucket_group(int b) const { return buckets_[size_t(b)].group; }
  // Bucket b's segment and range in it, every rank's part sizes, and where
  // this rank's part starts in the segment and in its shard.
  int bucket_segment(int b) const { return buckets_[size_t(b)].seg; }
  int64_t bucket_lo(int b) const { return buckets_[size_t(b)].lo; }
  int64_t bucket_len(int b) const { return buckets_[size_t(b)].hi - buckets_[size_t(b)].lo; }
  const std::vector<int64_t>& bucket_counts(int b) const { return buckets_[size_t(b)].counts; }
  int64_t part_lo(int b) const { return buckets_[size_t(b)].part_lo; }
  int64_t bucket_shard_off(int b) const { return buckets_[size_t(b)].shard_off; }

  // ZeRO partition (defined in every mode).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  int64_t shard_numel() const { return shard_numel_; }
  float* shard_grads() { return shard_grads_.allocated() ? shard_grads_.data() : nullptr; }
  // All-gathers bucket b of a flat buffer of dtype t (`base`: the start of its
  // segment), in place: this rank's part at base + part_lo(b) is sent,
  // everyone's parts land at base + lo.
  // Ordered after the compute stream; the handle says when it is done.
  CommHandle all_gather_bucket(int b, void* base, DType t);
  // The same from a separate part (this rank's counts(b)[rank] elements) into
  // `dst`, which points at the bucket's first element.
  CommHandle all_gather_bucket(int b, const void* part, void* dst, DType t);

 private:
  struct Bucket {
    int seg = 0;
    int64_t lo = 0, hi = 0;       // range in the segment
    std::vector<int> members;     // parameter indices, ascending
    std::vector<int64_t> counts;  // per rank
    int64_t part_lo = 0;          // this rank's part: [part_lo, part_lo + counts[me])
    int64_t shard_off = 0;
    int group = 0;
    int ready = 0;
    bool launched = false;
    CommHandle h;
    Tensor wire, wire_recv;  // bf16 staging while in flight
  };
  void launch(Bucket& b);
  std::vector<FlatParam> params_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<ShardPiece> pieces_;
  int64_t shard_numel_ = 0;
  Tensor shard_grads_;  // MemCat::Grads, reduce-scatter mode
  BucketOptions opt_;
  Communicator& comm_;
  Backend& be_;
  std::vector<float*> grads_;  // per segment
  int next_launch_ = 0;
};
}  // namespace st
