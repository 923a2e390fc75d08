// Llama-style decoder-only transformer on the CPU backend, fp32, with an
// explicit forward and backward pass: token embedding, pre-norm RMSNorm,
// RoPE, grouped-query causal attention, SwiGLU MLP, final RMSNorm, untied LM
// head, mean cross-entropy. Activation checkpointing: none (keep every
// activation), selective (drop attention internals, recompute them in
// backward; this implementation keeps only GEMM outputs and recomputes the
// attention core, the norms and the SwiGLU product), full (keep only each
// block's input, recompute the block). All three give bitwise the same loss
// and gradients.
//
// Parameter names and layouts follow the Llama reference code, so the
// PyTorch reference test can load them one to one. Linear weights are
// row-major [out_features, in_features]; y = x W^T.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "tensor/tensor.hpp"

namespace st {

enum class ActCkpt { None, Selective, Full };
ActCkpt parse_act_ckpt(const std::string& s);  // throws UsageError

struct Param {
  std::string name;  // e.g. "layers.3.attention.wq.weight"
  Tensor w;          // MemCat::Params
  Tensor g;          // MemCat::Grads, same shape, accumulated by backward
  bool decay = true; // weight decay applies (false for norm weights)
};

// forward_backward ADDS its phase times here (so micro-batches accumulate).
struct PhaseTimes {
  double fwd_s = 0;
  double bwd_s = 0;
};

class Model {
 public:
  Model(const ModelCfg& cfg, uint64_t seed);
  ~Model();

  const ModelCfg& cfg() const;
  std::vector<Param*> params();
  int64_t num_params() const;

  // tokens, targets: [B, T] int32 row-major, T <= seq_len. Runs forward and
  // backward, ADDS d(mean loss)/dw * grad_scale into every Param::g, and
  // returns the mean cross-entropy over the B*T targets.
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                         float grad_scale, ActCkpt mode, PhaseTimes* times = nullptr);

  // Forward only: mean cross-entropy (no activations kept).
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T);

  void zero_grad();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parameter count of a config (embedding + layers + final norm + head).
int64_t count_params(const ModelCfg& cfg);
}  // namespace st
