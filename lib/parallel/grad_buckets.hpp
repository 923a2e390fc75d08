// Gradient buckets of parallel.dp_bucket_mb over the gradient group (dp x cp).
// The model keeps its parameters in forward order at fixed offsets of one
// flat layout per pipeline chunk (model.hpp), so consecutive parameters in
// backward order are one range of it: a bucket is such a range. A bucket's
// collective starts as soon as every gradient in it is final (grad_ready,
// from the model's hook), ordered after the compute stream, so the
// reduction overlaps the rest of backward. finish() makes the compute stream
// wait for the tail.
//
// Two modes. All-reduce (ZeRO 0/1): the gradients live in the model's flat
// gradient buffer (set_buffer) and every rank gets the whole summed bucket
// back in place, during the last micro-batch's backward. Reduce-scatter
// (ZeRO 2/3): each rank keeps only its part of every bucket, in a persistent
// fp32 gradient shard (shard_grads()) that each reduction ADDS to:
//  - staged (the default): the gradients of a bucket are written into a
//    staging buffer taken when backward first needs it (stage(b), whose
//    pointer the engine binds the members' gradients to); when the bucket is
//    complete its reduce-scatter starts straight from it, and the buffer is
//    returned once the collective has consumed it (the compute stream waits
//    for the collective's handle, then adds the received part to the shard:
//    ordered by events, no host sync). At most BucketOptions::staging buffers
//    exist at once (taking one more first retires the oldest in flight), so
//    a gradient never exists at full size. Every micro-batch is reduced.
//  - flat (parallel.zero_full_grads): the model's flat gradient buffer
//    accumulates every micro-batch; during the last backward each bucket is
//    copied into a staging buffer and reduce-scattered from there.
// With reduce dtype bf16 a bucket is cast to bf16 for the wire (half the
// bytes) and the received part cast back. The sum is the sum: the model
// already scaled the loss gradient by 1 / (grad_accum * dp).
//
// Partition for ZeRO (per bucket; uniform parts as Megatron's distributed
// optimizer, cuts on rows as this project's checkpoints need): a bucket has
// its own layout of g * part(b) elements, its parameters in order, each at
// bucket_pos(i). Rank r owns [r * part, (r + 1) * part) of it. part(b) is at
// least ceil(len / g), a multiple of kPartAlign and of the row of every
// parameter longer than a part, and each parameter is placed (after some
// padding where needed) so that every cut falls on one of its row
// boundaries: every rank's part has the same size, so each bucket is exactly
// one equal-count reduce-scatter and one equal-count all-gather (NCCL has no
// uneven ones), and every piece is whole rows of its parameter's block, a
// rectangle of the global tensor even when tensor parallelism splits the
// columns, so a checkpoint saves it as one hyperslab. The padding belongs to
// no parameter, holds zeros and is never saved. Staging buffers use the
// bucket layout (backward writes into it directly); the model's flat buffers
// keep theirs, and flat-mode reductions and the gathers copy parameter by
// parameter between the two, unless the bucket is direct (bucket_direct:
// every parameter sits in the bucket layout where the flat layout has it,
// and g * part fits in the bucket's flat range), when the gathers land in
// the flat buffer itself, with no staging buffer and no copy. The rank's shard is the concatenation
// of its parts of every bucket; pieces() maps it back onto (parameter, offset) ranges for the
// optimizer, the gradient norm, checkpoints and the ZeRO-3 parameter gather.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/tensor.hpp"

namespace st {

class Backend;

// A parameter as the buckets see it: where its gradient lives. Gradients
// live in one or more flat layouts (segments: one per pipeline model chunk);
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
  int staging = 2;  // reduce-scatter: staging buffers alive at once (at least 1)
  // Reduce-scatter: gradients are written into stage(b) and every
  // micro-batch is reduced (a micro-batch's last bucket launched, the next
  // one starts over); otherwise set_buffer's flat buffers, reduced once.
  bool staged = false;
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

// A bucket all-gather in flight (GradBuckets::start_gather): every rank's
// part lands in `staging`; finish_gather() copies it into the flat layout.
struct BucketGather {
  int bucket = -1;
  void* dst = nullptr;  // the bucket's first element in the flat buffer
  DType t = DType::F32;
  Tensor staging;  // g * part(bucket) elements, MemCat::Comm; none for a direct bucket
  CommHandle h;
};

// Elements every part is a multiple of (512 bytes in fp32), as Megatron
// pads its buckets.
constexpr int64_t kPartAlign = 128;

class GradBuckets {
 public:
  // `seg_len`: each flat buffer's length. `comm` is the gradient group.
  // Buckets never span two segments.
  GradBuckets(std::vector<FlatParam> params, std::vector<int64_t> seg_len, const BucketOptions& o,
              Communicator& comm, Backend& be);
  ~GradBuckets();

  // Flat mode: segment seg's fp32 gradient buffer (set again after it is
  // reallocated).
  void set_buffer(int seg, float* grads) { grads_[size_t(seg)] = grads; }
  // A new step's reduction: nothing launched; in reduce-scatter mode the
  // shard is zeroed (on the compute stream).
  void start();
  // Staged mode, before a micro-batch's backward: every bucket waits for
  // all of its gradients again.
  void start_micro();
  // Staged mode: bucket b's zeroed staging buffer (bucket layout: parameter
  // i's gradient goes at bucket_pos(i)), taken on first use in this
  // micro-batch.
  float* stage(int b);
  // Bucket b has its staging buffer for this micro-batch (taken, not launched).
  bool staged(int b) const { return buckets_[size_t(b)].taken; }
  void set_staging(int n) { opt_.staging = std::max(1, n); }
  int staging() const { return opt_.staging; }
  void grad_ready(int i);  // parameter i's gradient is final (as enqueued on the compute stream)
  // Lets in-flight collectives progress (MPI needs calls) and returns the
  // staging buffers of those that have completed.
  void poll();
  // Launches what is left and makes the compute stream wait for every
  // bucket's reduction (added to the shard in reduce-scatter mode).
  void finish();
  // start(), every gradient ready (reverse order), finish().
  void reduce_all();
  // Seconds the last step's bucket collectives were in flight (launch to
  // completion, as far as known), the "total" to set against the exposed wait.
  double async_seconds();

  int num_buckets() const { return int(buckets_.size()); }
  int bucket_of(int param) const { return bucket_of_[size_t(param)]; }
  int bucket_group(int b) const { return buckets_[size_t(b)].group; }
  const std::vector<int>& bucket_members(int b) const { return buckets_[size_t(b)].members; }
  // Bucket b's segment and range in it, the part size every rank holds, and
  // where this rank's part starts in its shard.
  int bucket_segment(int b) const { return buckets_[size_t(b)].seg; }
  int64_t bucket_lo(int b) const { return buckets_[size_t(b)].lo; }
  int64_t bucket_len(int b) const { return buckets_[size_t(b)].hi - buckets_[size_t(b)].lo; }
  int64_t bucket_part(int b) const { return buckets_[size_t(b)].part; }
  int64_t bucket_shard_off(int b) const { return buckets_[size_t(b)].shard_off; }
  // Where parameter i starts in its bucket's layout.
  int64_t bucket_pos(int i) const { return pos_[size_t(i)]; }
  // The bucket layout is the flat one (see the file comment): gathers need
  // no staging buffer.
  bool bucket_direct(int b) const { return buckets_[size_t(b)].direct; }
  // The largest padded bucket (g * part): the size of a staging buffer.
  int64_t max_padded() const { return max_padded_; }

  // ZeRO partition (defined in every mode).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  int64_t shard_numel() const { return shard_numel_; }  // padding included
  float* shard_grads() { return shard_grads_.allocated() ? shard_grads_.data() : nullptr; }
  // Starts the all-gather of bucket b into a flat buffer of dtype t: `dst`
  // points at the bucket's first element there (bucket_lo). `part` is this
  // rank's part (part(b) elements of dtype part_t, shard layout), cast to t
  // into the staging buffer (a direct bucket: into dst) when the dtypes
  // differ; null: this rank's pieces are read from dst (in place). Ordered
  // after the compute stream.
  BucketGather start_gather(int b, const void* part, DType part_t, void* dst, DType t);
  // Makes the compute stream wait for g, copies every parameter of the
  // bucket into the flat layout and frees the staging buffer (in
  // compute-stream order).
  void finish_gather(BucketGather& g);
  // Every bucket of the flat buffers of dtype t (`bases`: each segment's
  // start) gathered in place, two buckets in flight at a time; the compute
  // stream waits.
  void gather_all(const std::vector<void*>& bases, DType t);

 private:
  struct Bucket {
    int seg = 0;
    int64_t lo = 0, hi = 0;    // range in the segment
    std::vector<int> members;  // parameter indices, ascending
    int64_t part = 0;          // elements per rank, the same on every rank
    int64_t shard_off = 0;
    int group = 0;
    int ready = 0;
    bool launched = false;
    bool retired = true;  // reduce-scatter: the received part is in the shard
    bool taken = false;   // staged: stage() gave out its buffer, not launched yet
    bool direct = false;  // bucket layout == flat layout, g * part within [lo, hi)
    CommHandle h;
    double seconds = 0;  // in flight, summed over the step's reductions
    Tensor stage;        // fp32 staging (g * part), while taken
    Tensor wire, recv;   // bf16 wire copy; the received part
  };
  void launch(Bucket& b);
  void place(Bucket& b, int g);  // part size and parameter positions
  void retire(Bucket& b);        // reduce-scatter: wait (stream), add to shard, free
  void retire_oldest();
  std::vector<FlatParam> params_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<int64_t> pos_;  // per parameter: start in its bucket's layout
  std::vector<ShardPiece> pieces_;
  std::vector<int> in_flight_;  // reduce-scatter buckets launched, not retired (oldest first)
  int64_t shard_numel_ = 0, max_padded_ = 0;
  Tensor shard_grads_;  // MemCat::Grads, reduce-scatter mode
  BucketOptions opt_;
  Communicator& comm_;
  Backend& be_;
  std::vector<float*> grads_;  // flat mode, per segment
  int next_launch_ = 0;
  int staged_ = 0;  // staging buffers taken
};
}  // namespace st
