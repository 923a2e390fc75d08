// One-GPU bf16 training step of the Llama model (the same math as the CPU
// st::Model of lib/model, single rank, no parallelism), built from the CUDA
// components: GemmLt (bf16 in, fp32 accumulate), CudnnSdpa (causal GQA
// attention), and the custom kernels of ops_cuda.hpp. Isolated from the CPU
// trainer: it is driven by ctest/cuda/test_cuda_step.cpp (against the CPU
// model) and by scaletrain-bench-step.
//
// Precision: fp32 master weights, fp32 gradients and AdamW moments; bf16
// compute copies of every weight (norm weights too) and bf16 activations.
// Parameter names and layouts are the CPU model's (model.hpp), so a test can
// copy that model's weights in one to one.
//
// Activation checkpointing: off keeps every block's activations until its
// backward; full keeps each block's input only and recomputes the block's
// forward just before its backward.
//
// Everything runs on one non-blocking stream owned by the object; device
// memory comes from the process-wide caching allocator (device.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/sdpa_cudnn.hpp"

namespace st::kernels::cuda {

// One parameter on the device.
struct CudaParam {
  std::string name;            // e.g. "layers.3.attention.wq.weight" (model.hpp's names)
  std::vector<int64_t> shape;  // row-major, linear weights [out, in]
  int64_t numel = 0;
  bool decay = true;  // false for norm weights
  st::cuda::DeviceBuffer w;     // fp32 master
  st::cuda::DeviceBuffer w16;   // bf16 compute copy
  st::cuda::DeviceBuffer g;     // fp32 gradient
  st::cuda::DeviceBuffer m, v;  // fp32 AdamW moments
  const bf16* wb() const { return w16.as<const bf16>(); }
  float* gf() const { return g.as<float>(); }
};

struct StepTimes {  // seconds of the last step, from CUDA events
  double fwd_s = 0, bwd_s = 0, opt_s = 0;
};

struct AdamWCfg {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class CudaLlama {
 public:
  // Allocates every parameter (weights zero until load_weights/init_random).
  explicit CudaLlama(const ModelCfg& cfg, AdamWCfg opt = {});
  ~CudaLlama();
  CudaLlama(const CudaLlama&) = delete;
  CudaLlama& operator=(const CudaLlama&) = delete;

  const ModelCfg& cfg() const { return cfg_; }
  const std::vector<std::unique_ptr<CudaParam>>& params() const { return params_; }
  int64_t num_params() const;

  // Master weight of `name` from host fp32 (numel must match); refreshes the
  // bf16 copy. Throws on an unknown name or a size mismatch.
  void load_weights(const std::string& name, const std::vector<float>& host);
  // Llama-style random init on the device (cuRAND): linear and embedding
  // weights normal(0, cfg.init_std), norm weights 1.
  void init_random(uint64_t seed);

  // Zeroes the gradients, runs forward, mean cross-entropy over the B*T
  // targets (targets < 0 ignored) and backward into the fp32 gradients.
  // tokens, targets: host [B, T] int32. Returns the loss (synchronises).
  float step_forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                              bool full_act_ckpt);
  // Global gradient norm clipped to `clip` (<= 0: no clip) on the device,
  // then AdamW on every parameter; refreshes the bf16 copies.
  void optimizer_step(float lr, float clip);

  std::vector<float> copy_grads_to_host(const std::string& name) const;
  std::vector<float> copy_weights_to_host(const std::string& name) const;

  const StepTimes& last_times() const;  // synchronises
  int64_t peak_device_bytes() const;    // caching allocator's in-use peak
  cudaStream_t stream() const { return stream_.get(); }

 private:
  struct Layer;
  struct Acts;
  CudaParam& param(const std::string& name) const;
  CudaParam* add(const std::string& name, std::vector<int64_t> shape, bool decay);
  void block_forward(int l, int64_t B, int64_t T, Acts& a, bf16* out);
  void block_backward(int l, int64_t B, int64_t T, Acts& a, bf16* dh);
  void rope_tables(int64_t T);

  ModelCfg cfg_;
  AdamWCfg opt_;
  st::cuda::Stream stream_;
  GemmLt gemm_;
  CudnnSdpa sdpa_;
  std::vector<std::unique_ptr<CudaParam>> params_;
  CudaParam *tok_emb_ = nullptr, *norm_ = nullptr, *output_ = nullptr;
  std::vector<Layer> layers_;
  st::cuda::DeviceBuffer rope_cos_, rope_sin_, sumsq_;
  int64_t rope_T_ = 0;
  int64_t step_ = 0;
  st::cuda::EventTimer t_fwd_, t_bwd_, t_opt_;
  mutable StepTimes times_;
};

}  // namespace st::kernels::cuda
