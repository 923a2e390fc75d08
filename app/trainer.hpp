// The training run: builds the run folder, model, optimizer, data loader and
// communicators from a resolved Config, then loops over steps, recording
// per-rank telemetry and printing one progress line per step on rank 0.
#pragma once
#include <string>

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
}  // namespace st
