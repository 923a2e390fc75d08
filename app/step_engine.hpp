// What the training loop (trainer.cpp) needs from a backend: one step's
// forward/backward with gradient reduction, the update, and the state that
// checkpoints save, as host views. Two implementations, picked at run time
// by runtime.device (never by #ifdef):
//   cpu   Engine (engine.hpp): every layout (dp, ZeRO 0-3, tp, sp, pp, cp),
//         MPI collectives on host buffers, fp32.
//   cuda  the CUDA engine (cuda/engine_cuda.cpp): one GPU per rank, bf16
//         compute with fp32 master weights and optimizer state, NCCL
//         gradient reduction (fp32 or bf16) overlapped with backward, data
//         parallelism. A build without the CUDA backend compiles
//         cuda/engine_cuda_stub.cpp instead, whose preflight says so.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpointing.hpp"
#include "config/config.hpp"
#include "data/data.hpp"
#include "parallel/mesh.hpp"
#include "runtime/runtime.hpp"

namespace st {

struct StepOut {
  double loss = 0, grad_norm = 0;
  double data_s = 0, fwd_s = 0, bwd_s = 0, optim_s = 0;
  double exposed_s = 0;      // seconds the step waited for communication
  double async_total_s = 0;  // seconds the bucket collectives were in flight
  bool finite = true;
};

// Bytes the backend holds, for telemetry and the progress line.
struct EngineMemory {
  int64_t peak_total = 0;  // since begin_step()
  int64_t params = 0, grads = 0, optim = 0;
  int64_t activations_peak = 0;
};

// The peak FLOP/s MFU is reported against, when the backend knows it.
struct DevicePeak {
  double flops = 0;    // per rank
  std::string source;  // where the figure comes from
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // Forward/backward over grad_accum micro-batches, gradient reduction,
  // global norm. Does not update the weights (see apply).
  virtual StepOut forward_backward(long step, const DataLoader& loader) = 0;
  // Clip and AdamW with learning rate lr (skipped when `skip`). Returns
  // seconds spent; adds exposed communication to *exposed_s.
  virtual double apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) = 0;

  // The state checkpoints save and restore: host views (trainer and
  // checkpointing.hpp). sync_state_to_host() makes them current and returns
  // the seconds it took (part of the checkpoint stall); after restore() has
  // filled them, sync_state_from_host() hands them to the backend.
  virtual TrainState train_state() = 0;
  virtual double sync_state_to_host() { return 0; }
  virtual void sync_state_from_host() {}

  virtual void begin_step() = 0;  // resets per-step peaks
  virtual EngineMemory memory() const = 0;
  virtual int num_buckets() const = 0;
  // Communicators beyond the mesh's MPI groups (NCCL), for per-step stats.
  virtual std::vector<Communicator*> extra_comms() { return {}; }
  // The device's peak (GPU table or config); nullopt: the trainer measures
  // the CPU's sgemm rate.
  virtual std::optional<DevicePeak> device_peak() const { return std::nullopt; }
  virtual std::string device_name() const = 0;  // "cpu" or the GPU's product name
  virtual std::string device_id() const = 0;    // "cpu" or "cuda:<ordinal>"
};

// The CPU engine (engine.cpp).
std::unique_ptr<StepEngine> make_cpu_engine(const Config& cfg, Mesh& mesh);

// CUDA engine. Preflight (collective-free, cheap): picks this rank's GPU from
// its node-local rank, checks the build and the layout; returns "" or the
// reason it cannot run (the trainer makes every rank agree before any NCCL
// call). make_cuda_engine is collective over the world (NCCL start-up).
std::string cuda_engine_preflight(const Config& cfg, const Runtime& rt);
std::unique_ptr<StepEngine> make_cuda_engine(const Config& cfg, Mesh& mesh, MpiCommunicator& world,
                                             const Runtime& rt);
}  // namespace st
