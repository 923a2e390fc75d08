// AdamW with fp32 master weights and moments on the backend's device,
// global-norm gradient clipping, and learning-rate schedules (constant,
// linear, cosine), each with linear warm-up. The optimizer works on flat
// slots (name, master weights, gradient, optional compute copy), so the same
// code updates whole tensors or ZeRO shards; the update is the backend's one
// multi-tensor AdamW (kernels/ops.hpp), enqueued on the compute stream.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "tensor/tensor.hpp"

namespace st {

class Backend;

enum class Schedule { Constant, Linear, Cosine };
Schedule parse_schedule(const std::string& s);  // throws UsageError

// lr at 1-based step `step` of `total` steps.
double lr_at(const OptimCfg& o, long step, long total);

struct OptimSlot {
  std::string name;
  float* w = nullptr;        // master weights (fp32, device)
  const float* g = nullptr;  // gradient (fp32, device; already summed over data parallel ranks)
  int64_t n = 0;
  bool decay = true;
  void* wc = nullptr;  // compute copy refreshed after each update (null: w is read directly)
  DType wc_t = DType::BF16;
  Tensor m, v;  // first and second moments, MemCat::Optim
};

class AdamW {
 public:
  AdamW(const OptimCfg& cfg, Backend& be) : cfg_(cfg), be_(be) {}
  // Registers a slot; allocates its moments (zeroed).
  void add(const std::string& name, float* w, const float* g, int64_t n, bool decay,
           void* wc = nullptr, DType wc_t = DType::BF16);
  std::vector<OptimSlot>& slots() { return slots_; }
  // One update with learning rate lr; grads multiplied by grad_scale first
  // (the clipping coefficient). `t` is the 1-based optimizer step.
  void step(double lr, double grad_scale, long t);
  int64_t state_bytes() const;

 private:
  OptimCfg cfg_;
  Backend& be_;
  std::vector<OptimSlot> slots_;
};

// Clip coefficient for global norm `norm` and threshold `clip` (0: off).
double clip_coef(double norm, double clip);
}  // namespace st
