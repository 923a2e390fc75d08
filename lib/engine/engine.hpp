// The step engine: one training step of this rank under the configured
// layout, written once for every backend. It owns the model (one Model per
// pipeline model chunk) and the optimizer, and calls the ZeRO verbs of the
// bucket layer (parallel/zero_sync.hpp) at the same points whatever the ZeRO
// stage: that layer decides what each stage shards, reduces and gathers,
// owns the gradient buckets and the fp32 master weights, and builds the
// table of this rank's sharded state (optim/state_table.hpp) that the
// optimizer, the gradient norm and the checkpoints read. A step reads top
// to bottom: the schedule (engine_pipeline.cpp) runs every micro-batch's
// forward and backward (pp = 1 is a one-stage pipeline), the gradient
// reductions finish, the global norm and loss are summed, and apply() runs
// clip + AdamW and brings the compute weights in line. The trainer
// (app/trainer.cpp) runs the loop, telemetry and checkpoints around it.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "config/config.hpp"
#include "data/data.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/mesh.hpp"
#include "parallel/zero_sync.hpp"

namespace st {

struct StepOut {
  double loss = 0, grad_norm = 0;
  // Seconds: data, fwd, bwd and comm_exposed (the waits for communication
  // outside the passes' own compute) of forward_backward.
  StepMeasured t;
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
  // shards are gathered back into the compute weights. Returns the
  // optimizer's seconds (the device's, waited for) less the gathers' wait,
  // which it adds to *exposed_s (when given).
  double apply(long step, double lr, double grad_norm, bool skip, double* exposed_s);

  // The table of this rank's sharded state (optim/state_table.hpp), which
  // checkpoints save and restore (train_state.hpp).
  StateTable& state() { return state_; }
  // After restore() filled the master weights and moments: bring the compute
  // weights in line (casts, ZeRO 1/2 gathers).
  void after_restore();

  void begin_step();  // resets per-step peaks
  EngineMemory memory() const;
  int num_buckets() const { return sync_->buckets().num_buckets(); }
  // Every communicator the step uses, each once, for per-step statistics.
  std::vector<Communicator*> comms();

  Backend& backend() { return be_; }
  std::vector<Param*>& params() { return params_; }
  const GradBuckets& buckets() const { return sync_->buckets(); }
  int64_t num_params() const;  // elements this rank holds
  DType compute_dtype() const { return cdt_; }

 private:
  // Pipeline point-to-point: each direction has a communicator per sender
  // colour (engine_pipeline.cpp), so a stage's sends never queue behind its
  // receives on one stream.
  void make_pp_links();
  Communicator& pp_link(bool forward, int sender);
  // Every micro-batch's forward and backward in the stage's schedule;
  // returns the seconds the compute stream waited for pipeline messages.
  double run_schedule(long step, const DataLoader& loader, StepOut& o);
  // Tests the pipeline sends in flight (pp_sends_): the layer hooks call it,
  // so a message moves while its stage computes the next op. MPI over TCP
  // moves a large message only inside the sender's MPI calls: untested, a
  // stage's activations waited for its whole next forward (docs/design.md).
  void progress_pp_sends();
  void load(const DataLoader& loader, long step, int m, MicroBatch& mb, StepOut& o);
  const Config& cfg_;
  Mesh& mesh_;
  Backend& be_;
  Device& dev_;
  ZeroMode zero_;  // what the ZeRO stage shards (zero_sync.hpp)
  DType cdt_;
  // The device communicators, made at construction in one order every rank
  // computes alike (backend.hpp), each by its name.
  struct DeviceGroups {
    Communicator* dpcp = nullptr;  // the gradient group
    Communicator* tp = nullptr;
    Communicator* cp = nullptr;
    std::vector<Communicator*> pp;  // one per pipeline link, pp_links_' order
  } comms_;
  Communicator* dpcp_ = nullptr;                      // comms_.dpcp
  std::vector<std::unique_ptr<HostGroup>> pp_links_;  // pipeline p2p (engine_pipeline.cpp)
  struct PpSend {
    Tensor buf;  // kept until the send completes
    CommHandle h;
  };
  std::vector<PpSend> pp_sends_;                // this step's pipeline sends (run_schedule)
  std::vector<std::unique_ptr<Model>> chunks_;  // model chunks of this stage
  std::vector<int> base_;                       // index of each chunk's first param
  std::vector<Param*> params_;
  std::unique_ptr<AdamW> opt_;
  StateTable state_;
  std::unique_ptr<ZeroSync> sync_;  // the ZeRO verbs over the gradient buckets
  ActCkpt ckpt_mode_;
  Tensor norm_sq_;  // fp64 [2]: sums of squares (tp-sharded, replicated)
};
}  // namespace st
