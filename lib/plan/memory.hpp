// The one memory model: peak bytes per device of one rank of a pipeline stage
// under a config's layout, split into parts. The trainer's --dry-run
// (app/dry_run.cpp) and scaletrain-plan both call it.
//
// It follows what the engines allocate (docs/planner.md has the derivation):
// parameters, gradients and AdamW moments by ZeRO stage over dp x cp; the
// activations each block keeps for backward under act_ckpt none / selective
// / full; the transient tensors of the forward, the head and the backward;
// the micro-batch chunks a pipeline schedule keeps in flight; the bucket
// buffers of the gradient reduction and the ZeRO-3 gathered layers. The peak
// is the largest sum over the moments of one step (forward of a block, the
// head, backward of a block, each bucket launch, the end of the reduction).
//
// The engine is the same on every device (lib/engine): compute weights and
// activations in train.precision (fp32 or bf16), fp32 gradients (one flat
// buffer per model chunk, reduced in place), fp32 master weights (a separate
// copy unless the compute weights are fp32 and replicated) and moments.
// runtime.device=cuda adds the cuBLASLt workspace, which the device
// allocator does not count.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "plan/layout.hpp"

namespace st::plan {

struct MemParts {
  double weights = 0;      // compute weights (ZeRO-3: shard + gathered layers) + fp32 master
  double grads = 0;        // gradients: the flat buffer and/or this rank's shard
  double optim = 0;        // AdamW moments
  double activations = 0;  // kept for backward, plus the transients of the peak moment
  double buffers = 0;      // communication: bf16 bucket wires, pipeline messages in flight
  double workspace = 0;    // GPU GEMM workspace; 0 on CPU
  double total() const { return weights + grads + optim + activations + buffers + workspace; }
};

struct MemoryEstimate {
  StageShape shape;
  MemParts peak;        // each part at the predicted peak moment
  std::string peak_at;  // the moment, e.g. "head backward", "end of gradient reduction"
  double activations_max =
      0;  // the largest activation bytes of the step (trainer's activation peak)
  // Bytes of `peak` the trainer's tracked allocator does not see (the GPU
  // libraries' workspaces): mem_peak_bytes in telemetry compares to
  // total() - untracked.
  double untracked = 0;
  double tracked() const { return peak.total() - untracked; }
};

// Peak of one rank of pipeline stage `stage`. cfg must be resolved
// (parallel.dp set) and valid.
MemoryEstimate estimate_memory(const Config& cfg, int stage);
// The stage with the largest total.
MemoryEstimate estimate_memory_worst(const Config& cfg);

}  // namespace st::plan
