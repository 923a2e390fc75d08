// The step engine: one training step of this rank under the configured
// layout. It owns the model, the optimizer and the gradient buckets, and
// binds the ZeRO partition of lib/parallel to them:
//   ZeRO 0  gradients all-reduced in buckets; every rank updates everything.
//   ZeRO 1  gradients all-reduced; AdamW moments only for this rank's shard;
//           updated shards all-gathered into the parameters.
//   ZeRO 2  gradients reduce-scattered into this rank's shard; the full
//           gradient buffers are freed after the reduction (re-allocated
//           before the next backward).
//   ZeRO 3  as 2, and the fp32 master weights are sharded too: the rank keeps
//           only its shard (master_shard()); the model's layer hooks gather a
//           layer into Param::w just before use and free it right after,
//           with the next layer's gather started while this one computes
//           (parallel/zero3.hpp). AdamW updates the shard in place.
// The shard is the per-bucket partition of grad_buckets.hpp over the dp x cp
// group (ranks holding the same parameters). The trainer (trainer.cpp) runs
// the loop, telemetry and checkpoints around it.
#pragma once
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "data/data.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/mesh.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/zero3.hpp"
#include "step_engine.hpp"

namespace st {

class Engine final : public StepEngine {
 public:
  Engine(const Config& cfg, Mesh& mesh);
  // Forward/backward over grad_accum micro-batches, gradient reduction, norm.
  // Does not update the weights (see apply).
  StepOut forward_backward(long step, const DataLoader& loader) override;
  // Clip and AdamW with learning rate lr (skipped when `skip`); ZeRO shards
  // are gathered back into the parameters. Returns seconds spent.
  double apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) override;
  // Views into the live tensors (nothing to copy on CPU ranks).
  TrainState train_state() override;
  void begin_step() override;
  EngineMemory memory() const override;  // MemStats (host allocator)
  int num_buckets() const override { return buckets_->num_buckets(); }
  std::string device_name() const override { return "cpu"; }
  std::string device_id() const override { return "cpu"; }

  // Every parameter this rank holds (all its model chunks, chunk order).
  std::vector<Param*>& params() { return params_; }
  AdamW& optimizer() { return *opt_; }
  const GradBuckets& buckets() const { return *buckets_; }
  int zero_stage() const { return zero_; }
  int64_t num_params() const;  // elements this rank holds
  // ZeRO 3: this rank's shard of the master weights (shard_off coordinates
  // of buckets()); null under ZeRO 0-2, where Param::w holds them.
  float* master_shard() { return zero_ >= 3 ? master_.data() : nullptr; }

 private:
  void ensure_grads();           // ZeRO 2: (re)allocate the gradient buffers
  void before_layer(int layer);  // ZeRO 3: gather (and prefetch the next)
  double run_pipeline(long step, const DataLoader& loader, StepOut& o);
  const Config& cfg_;
  Mesh& mesh_;
  int zero_;
  std::vector<std::unique_ptr<Model>> chunks_;  // model chunks of this stage
  std::vector<int> base_;                       // index of each chunk's first param
  bool collect_ = false;  // forward grad_ready to the buckets (last micro-batch)
  std::vector<Param*> params_;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<GradBuckets> buckets_;
  ActCkpt ckpt_mode_;
  // ZeRO 3
  Tensor master_;  // MemCat::Params, this rank's shard of the fp32 weights
  std::unique_ptr<ParamGather> gather_;
  int last_layer_ = 0, dir_ = 1;  // previous before_layer and walking direction
  bool more_micro_ = false;       // another micro-batch follows this one
  double gather_wait_s_ = 0;      // exposed all-gather seconds this step
};
}  // namespace st
