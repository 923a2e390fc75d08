// AdamW with fp32 master weights and moments, global-norm gradient clipping,
// and learning-rate schedules (constant, linear, cosine), each with linear
// warm-up. The optimizer works on flat (name, weight, grad) views so the same
// code updates whole tensors or ZeRO shards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "tensor/tensor.hpp"

namespace st {

enum class Schedule { Constant, Linear, Cosine };
Schedule parse_schedule(const std::string& s);  // throws UsageError

// lr at 1-based step `step` of `total` steps.
double lr_at(const OptimCfg& o, long step, long total);

struct OptimSlot {
  std::string name;
  float* w = nullptr;       // master weights (fp32)
  const float* g = nullptr; // gradient (already averaged over data parallel ranks)
  int64_t n = 0;
  bool decay = true;
  Tensor m, v;              // first and second moments, MemCat::Optim
};

class AdamW {
 public:
  explicit AdamW(const OptimCfg& cfg) : cfg_(cfg) {}
  // Registers a slot; allocates its moments.
  void add(const std::string& name, float* w, const float* g, int64_t n, bool decay);
  std::vector<OptimSlot>& slots() { return slots_; }
  // One update with learning rate lr; grads multiplied by grad_scale first
  // (the clipping coefficient). `t` is the 1-based optimizer step.
  void step(double lr, double grad_scale, long t);
  int64_t state_bytes() const;

 private:
  OptimCfg cfg_;
  std::vector<OptimSlot> slots_;
};

// Sum of squares of a buffer, in double (for the global gradient norm).
double sum_squares(const float* x, int64_t n);
// Clip coefficient for global norm `norm` and threshold `clip` (0: off).
double clip_coef(double norm, double clip);
}  // namespace st
