// The step engine: one training step of this rank under the configured
// layout, written once for every backend. It owns the model (one Model per
// pipeline model chunk), the fp32 master weights, the optimizer and the
// gradient buckets, and binds the ZeRO partition of lib/parallel to them:
//   ZeRO 0  gradients all-reduced in buckets; every rank updates everything.
//   ZeRO 1  gradients all-reduced; master weights and AdamW moments only for
//           this rank's shard; the updated shards are all-gathered into the
//           compute weights.
//   ZeRO 2  as 1, but gradients are reduce-scattered into this rank's shard:
//           backward writes each bucket into a staging buffer from a small
//           pool and every micro-batch's bucket is reduce-scattered into
//           (added to) the persistent fp32 gradient shard as soon as it is
//           complete (grad_buckets.hpp), so no gradient exists at full size.
//           parallel.zero_full_grads (and interleaved pipelines) keep the
//           full flat gradient buffer across micro-batches instead,
//           reduce-scattered once per step and freed after it.
//   ZeRO 3  as 2, and the weights are sharded too: the rank keeps only its
//           fp32 master shard (16 bytes per parameter of persistent state
//           with the gradient shard and the moments, at any dp); the model's
//           layer hooks gather a layer's compute weights just before use
//           (cast from the master shard, then all-gathered) and free them
//           right after, with the next layer's gather started while this
//           one computes (parallel/zero3.hpp).
// Master weights: with fp32 compute under ZeRO 0-2 the compute weights are
// the master weights; otherwise the master is a separate fp32 buffer (whole
// under ZeRO 0, the rank's shard under ZeRO >= 1) and AdamW refreshes the
// compute copy. Which pieces this rank updates, and where each one's
// master, moments, compute copy and gradient live, is one table built at
// construction (optim/state_table.hpp): the optimizer, the gradient norm and
// the checkpoints read it. The shard is the per-bucket partition of grad_buckets.hpp
// over the dp x cp group (ranks holding the same parameters). Pipelines run
// 1F1B or the interleaved schedule (engine_pipeline.cpp). The trainer
// (app/trainer.cpp) runs the loop, telemetry and checkpoints around it.
#pragma once
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "config/config.hpp"
#include "data/data.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/mesh.hpp"
#include "parallel/zero3.hpp"

namespace st {

struct StepOut {
  double loss = 0, grad_norm = 0;
  double data_s = 0, fwd_s = 0, bwd_s = 0;
  double exposed_s = 0;      // seconds the step waited for communication
  double async_total_s = 0;  // seconds the bucket collectives were in flight
  bool finite = true;
};

// Bytes the backend's device holds, for telemetry and the progress line.
struct EngineMemory {
  int64_t peak_total = 0;  // since begin_step()
  int64_t params = 0, grads = 0, optim = 0;
  int64_t activations_peak = 0;
};

class Engine {
 public:
  // Collective over the world (communicators are created on the mesh groups).
  Engine(const Config& cfg, Mesh& mesh, Backend& be);
  ~Engine();
  // Forward/backward over grad_accum micro-batches, gradient reduction, global
  // norm. Does not update the weights (see apply).
  StepOut forward_backward(long step, const DataLoader& loader);
  // Clip and AdamW with learning rate lr (skipped when `skip`); ZeRO 1/2
  // shards are gathered back into the compute weights. Returns the seconds
  // spent (the device's, waited for); adds exposed communication to *exposed_s.
  double apply(long step, double lr, double grad_norm, bool skip, double* exposed_s);

  // The table of this rank's sharded state (optim/state_table.hpp), which
  // checkpoints save and restore (train_state.hpp).
  StateTable& state() { return state_; }
  // After restore() filled the master weights and moments: bring the compute
  // weights in line (casts, ZeRO 1/2 gathers).
  void after_restore();

  void begin_step();  // resets per-step peaks
  EngineMemory memory() const;
  int num_buckets() const { return buckets_->num_buckets(); }
  // Every communicator the step uses, each once, for per-step statistics.
  std::vector<Communicator*> comms();

  Backend& backend() { return be_; }
  std::vector<Param*>& params() { return params_; }
  const GradBuckets& buckets() const { return *buckets_; }
  int64_t num_params() const;  // elements this rank holds
  DType compute_dtype() const { return cdt_; }

 private:
  void build_state(bool shard_optim);  // the table, masters and moments
  void ensure_grads();                 // (re)allocate the gradient buffer (ZeRO 2/3 free it)
  // ZeRO >= 2: stage the layer's gradient buckets; ZeRO 3: gather (and
  // prefetch the next).
  void before_layer(int chunk, int layer);
  // Pipeline point-to-point: each direction has a communicator per sender
  // colour (engine_pipeline.cpp), so a stage's sends never queue behind its
  // receives on one stream.
  void make_pp_links();
  Communicator& pp_link(bool forward, int sender);
  double run_pipeline(long step, const DataLoader& loader, StepOut& o);
  void load(const DataLoader& loader, long step, int m, MicroBatch& mb, StepOut& o);
  double gather_shards(double* exposed);  // ZeRO 1/2 after the update
  const Config& cfg_;
  Mesh& mesh_;
  Backend& be_;
  Device& dev_;
  // What the ZeRO stage shards besides the optimizer state (the table says
  // that): gradients (>= 2, reduce-scattered) and weights (3, gathered).
  bool shard_grads_, shard_weights_;
  bool regather_ = false;  // all-gather the updated pieces into the compute weights
  DType cdt_;
  Communicator* dpcp_ = nullptr;     // the gradient group, on the device
  std::vector<Communicator*> used_;  // every device communicator: dp x cp, tp, cp, pp links
  std::vector<std::unique_ptr<HostGroup>> pp_links_;  // pipeline p2p (engine_pipeline.cpp)
  std::vector<std::unique_ptr<Model>> chunks_;        // model chunks of this stage
  std::vector<int> base_;                             // index of each chunk's first param
  bool collect_ = false;  // forward grad_ready to the buckets (last micro-batch)
  bool staged_ = false;   // gradients in bucket staging buffers (grad_buckets.hpp)
  bool in_backward_ = false;
  // (chunk, layer) -> the buckets holding that layer's parameters (staged).
  std::map<std::pair<int, int>, std::vector<int>> layer_buckets_;
  std::vector<Param*> params_;
  std::unique_ptr<AdamW> opt_;
  StateTable state_;
  std::unique_ptr<GradBuckets> buckets_;
  ActCkpt ckpt_mode_;
  Tensor master_;  // separate fp32 master weights (whole flat, or the shard)
  std::unique_ptr<ParamGather> gather_;
  int last_layer_ = 0, dir_ = 1;  // previous before_layer and walking direction
  bool more_micro_ = false;       // another micro-batch follows this one
  Tensor norm_sq_;                // fp64 [2]: sums of squares (tp-sharded, replicated)
};
}  // namespace st
