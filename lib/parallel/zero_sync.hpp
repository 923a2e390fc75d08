// ZeRO as verbs of the bucket layer. The engine calls the same verbs at the
// same points of every step whatever the ZeRO stage, and this layer decides
// what each stage does (Megatron-LM's bucket groups, whose start/finish
// param and grad syncs play the same part; torchtitan applies FSDP always, a
// no-op at degree 1). What a stage shards is one table, ZeroMode, derived
// from the config once; the verbs read it:
//   ZeRO 0  gradients all-reduced in buckets during the last micro-batch's
//           backward; every rank updates everything.
//   ZeRO 1  as 0, with master weights and AdamW moments for this rank's
//           shard only; the updated shards are all-gathered into the compute
//           weights after each update.
//   ZeRO 2  gradients reduce-scattered into this rank's persistent fp32
//           shard: staged (the default) writes each layer's buckets into
//           staging buffers from a small pool and reduces every micro-batch
//           (grad_buckets.hpp), so no gradient exists at full size;
//           parallel.zero_full_grads (and interleaved pipelines) keep the
//           full flat gradient buffer over the step instead, reduced once
//           and freed after it.
//   ZeRO 3  as 2, and the weights too: only the fp32 master shard persists;
//           a layer's compute weights are gathered just before use and
//           freed after it, the next layer's gather started meanwhile
//           (zero3.hpp).
// The verbs, in the order a step calls them:
//   start_step()                  zeroes what accumulates (buffers, shard)
//   start_pass / end_pass around every forward and backward pass; the layer
//   hooks finish_param_sync (before a layer: staging, gather and prefetch),
//   release_params (after it) and grad_ready (bucket reductions start as
//   buckets complete) inside the passes
//   finish_grad_sync()            the compute stream waits for every reduction
//   sum_norm_sq()                 the gradient norm's sums over the shards
//   gather_params()               after the optimizer: compute weights in line
// The sharded-state table (optim/state_table.hpp) is built here as well:
// which pieces this rank updates and where their masters, compute copies
// and gradients live is what the stage decides.
#pragma once
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "config/config.hpp"
#include "optim/state_table.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/zero3.hpp"
#include "tensor/interval.hpp"

namespace st {

class Backend;
class Model;
struct Param;

// What the ZeRO stage shards: the one table the verbs read.
struct ZeroMode {
  bool shard_optim = false;    // >= 1: masters and moments of this rank's shard only
  bool shard_grads = false;    // >= 2: gradients reduce-scattered into a persistent shard
  bool shard_weights = false;  // 3: compute weights gathered per layer (per-layer buffers)
  // >= 2 with one model chunk and without zero_full_grads: gradients in
  // bucket staging buffers, reduced every micro-batch.
  bool staged = false;
  // 1 and 2 over more than one rank: the updated pieces are all-gathered
  // into the whole compute weights.
  bool regather = false;
};
// The mode of parallel.zero_stage (and zero_full_grads, num_model_chunks)
// over a gradient group of `replicas` ranks.
ZeroMode zero_mode(const ParallelCfg& pc, int replicas);

class ZeroSync {
 public:
  // `chunks`: this stage's model chunks (parameters indexed chunk by chunk);
  // `group`: the gradient group (dp x cp) on the device, `host_group` the
  // same ranks for host scalars.
  // `state`: the masters' and moments' dtype (optim.state_dtype): F32, or
  // BF16 (then compute must be BF16: the masters are the compute weights).
  ZeroSync(const ZeroMode& mode, std::vector<Model*> chunks, const ParallelCfg& pc,
           Communicator& group, HostGroup& host_group, Backend& be, DType compute,
           DType state = DType::F32);
  ~ZeroSync();

  // ---- Set-up ----
  // Fills `st`: the pieces this rank updates (whole parameters when the
  // optimizer state is replicated, the partition's pieces otherwise), each
  // with its fp32 master (a separate buffer filled with the seeded initial
  // values, unless the fp32 compute weights are whole here and are it), its
  // compute copy and its reduced gradient. With bf16 state the masters are
  // the compute weights (ZeRO 0-2: no separate buffer, no compute copy); under
  // ZeRO 3 the separate shard is bf16 and a gather copies it uncast.
  void build_state(StateTable& st, int tp_rank);
  // After the optimizer's moments exist: ZeRO 2/3 keep no full gradient
  // buffer between steps (staged, or allocated per step).
  void free_full_grads();
  // After a restore filled the masters: casts into the compute copies and
  // gathers the shards into the compute weights.
  void refresh_params();

  // ---- The step ----
  void start_step();
  // Around each forward or backward pass of a micro-batch: `last` is the
  // chunk's last micro-batch of the step, `more_forward` whether a forward
  // pass of another micro-batch follows this one's backward.
  void start_pass(bool backward, bool last, bool more_forward);
  void end_pass();
  // Layer hooks (model.hpp): before a layer's parameters are read, after the
  // pass no longer needs them, and parameter i's gradient is final.
  void finish_param_sync(int chunk, int layer);
  void release_params(int layer);
  void grad_ready(int param);
  // Completes the gathers in flight, launches what is left of the
  // reductions and makes the compute stream wait for them (the wait timed
  // by `tail`); full gradient buffers of ZeRO 2 are freed after it.
  void finish_grad_sync(StreamInterval& tail);
  // sq[0..n): sums of squares over this rank's pieces, summed over the
  // group when the pieces are shards.
  void sum_norm_sq(double* sq, int n);
  // After the optimizer step: the updated shards all-gathered into the
  // compute weights (waited for; the seconds added to *exposed when given).
  void gather_params(double* exposed);

  // Seconds the compute stream waited for parameter gathers since the last
  // call (after a synchronisation), inside the forward and the backward
  // passes; and the bucket reductions' time in flight.
  StepMeasured take_param_waits();
  double async_seconds() { return buckets_->async_seconds(); }
  const GradBuckets& buckets() const { return *buckets_; }

 private:
  void fill_initial(const Param& p, int chunk, int64_t off, int64_t len, void* dst);

  ZeroMode mode_;
  std::vector<Model*> chunks_;
  std::vector<Param*> params_;  // every chunk's, in order
  std::vector<int> base_;       // index of each chunk's first param
  Communicator& group_;
  HostGroup& host_group_;
  Backend& be_;
  DType cdt_;
  DType state_t_;  // the masters' and moments' dtype
  int n_layers_;
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<ParamGather> gather_;
  Tensor master_;  // separate master weights of state_t_ (whole flat, or the shard)
  StateTable* state_ = nullptr;
  // (chunk, layer) -> the buckets holding that layer's parameters (staged).
  std::map<std::pair<int, int>, std::vector<int>> layer_buckets_;
  bool collect_ = false;      // forward grad_ready to the buckets
  bool in_backward_ = false;  // inside a backward pass
  bool more_forward_ = false;
  int last_layer_ = 0, dir_ = 1;  // previous finish_param_sync and walking direction
};
}  // namespace st
