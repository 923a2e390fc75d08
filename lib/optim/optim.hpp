// AdamW with master weights and moments on the backend's device (fp32, or
// bf16 with stochastic rounding: optim.state_dtype),
// global-norm gradient clipping, and learning-rate schedules (constant,
// linear, cosine), each with linear warm-up. The optimizer works on
// the pieces of the engine's state table (state_table.hpp), so the same
// code updates whole tensors or ZeRO shards; the update is the backend's one
// multi-tensor AdamW (kernels/ops.hpp), enqueued on the compute stream.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "optim/state_table.hpp"
#include "tensor/tensor.hpp"

namespace st {

class Backend;

enum class Schedule { Constant, Linear, Cosine };
Schedule parse_schedule(const std::string& s);  // throws UsageError

// The learning rate at each 1-based step of a run of `total` steps
// (optim.lr, warmup_steps, schedule, min_lr_ratio); the schedule's name is
// parsed once, at construction.
class LrSchedule {
 public:
  LrSchedule() = default;
  LrSchedule(const OptimCfg& o, long total);  // throws UsageError for an unknown schedule
  double at(long step) const;

 private:
  Schedule kind_ = Schedule::Constant;
  double peak_ = 0, floor_ = 0;
  long warmup_ = 0, total_ = 1;
};

class AdamW {
 public:
  // `seed`: train.seed, which seeds the stochastic rounding of bf16 state.
  AdamW(const OptimCfg& cfg, Backend& be, uint64_t seed = 0) : cfg_(cfg), be_(be), seed_(seed) {}
  // Allocates the moments of every piece of `t` (zeroed, in the piece's state dtype).
  void init(StateTable& t);
  // One update of every piece of `t` with learning rate lr; grads multiplied
  // by grad_scale first (the clipping coefficient). `step` is the 1-based
  // optimizer step.
  void step(StateTable& t, double lr, double grad_scale, long step);

 private:
  OptimCfg cfg_;
  Backend& be_;
  uint64_t seed_ = 0;
};

// Clip coefficient for global norm `norm` and threshold `clip` (0: off).
double clip_coef(double norm, double clip);
}  // namespace st
