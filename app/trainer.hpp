// The training run: builds the run folder, model, optimizer, data loader and
// communicators from a resolved Config, then loops over steps, recording
// per-rank telemetry and printing one progress line per step on rank 0.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "metrics/metrics.hpp"
#include "runtime/runtime.hpp"

namespace st {
// Runs the whole job; returns the process exit code (0 ok, kExitPreempted
// after a signal-triggered emergency checkpoint).
int run_training(Runtime& rt, Config cfg);
// The model's shape as the FLOP formulas take it, and the global batch in
// sequences (micro_batch x grad_accum x dp).
metrics::ModelShape model_shape(const Config& cfg);
int64_t global_batch(const Config& cfg);

// --dry-run: print the resolved config and the estimates; no training.
void print_dry_run(const Runtime& rt, const Config& cfg);

// Bytes of activations one rank keeps for one micro-batch (an estimate from
// the model shape and the activation-checkpointing mode).
double estimate_activation_bytes(const ModelCfg& m, int micro_batch, const std::string& act_ckpt);

// Estimated resident bytes of world rank `rank` under cfg's layout (dry_run.cpp).
struct LayoutMemory {
  std::vector<std::pair<int, int>> layers;  // [first, last) per model chunk
  double params = 0, grads = 0, optim = 0, activations = 0;
  double total() const { return params + grads + optim + activations; }
};
LayoutMemory estimate_layout_memory(const Config& cfg, int rank);
}  // namespace st
