// Peak device memory of one rank of a pipeline stage, read from the
// trainer's own engine run on the recording backend (recorded_step.hpp):
// the bytes its allocator would hold by category at the moment the step's
// total peaked and where that was; the backend's own workspaces (the CUDA
// backend's cuBLASLt workspace) are allocated in the record as the backend
// allocates them, so every byte is one the trainer's allocator tracks. The trainer's
// --dry-run and its host-memory check, and scaletrain-plan's feasibility
// check (against the cluster's memory less its reserve), all read it.
#pragma once
#include <string>

#include "config/config.hpp"

namespace st::plan {

struct MemParts {
  double weights = 0;      // compute weights and fp32 masters (MemCat params)
  double grads = 0;        // gradients (flat buffers, shards)
  double optim = 0;        // AdamW moments
  double activations = 0;  // kept for backward and the transients of the peak moment
  double buffers = 0;      // communication: bucket wires, gathered layers, pipeline messages
  double workspace = 0;    // the rest the allocator holds (the backend's workspaces)
  double total() const { return weights + grads + optim + activations + buffers + workspace; }
};

struct MemoryEstimate {
  int stage = 0;
  MemParts peak;               // each part at the recorded peak moment
  std::string peak_at;         // where in the step: "micro-batch 3, after 812 kernels (gemm)"
  double activations_max = 0;  // the step's largest activation bytes
};

// Peak of one rank of pipeline stage `stage`. cfg must be resolved
// (parallel.dp set) and valid.
MemoryEstimate estimate_memory(const Config& cfg, int stage);
// The stage with the largest total.
MemoryEstimate estimate_memory_worst(const Config& cfg);

}  // namespace st::plan
