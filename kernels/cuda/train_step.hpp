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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "config/config.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/sdpa_cudnn.hpp"

namespace st::kernels::cuda {

// One parameter on the device. Gradients of all parameters live in one flat
// fp32 buffer (param order, each start aligned to 256 B), so the gradients
// of one layer are one contiguous range: a gradient bucket for NCCL.
struct CudaParam {
  std::string name;            // e.g. "layers.3.attention.wq.weight" (model.hpp's names)
  std::vector<int64_t> shape;  // row-major, linear weights [out, in]
  int64_t numel = 0;
  bool decay = true;  // false for norm weights
  int layer = 0;      // -1 embedding, 0..n_layers-1 blocks, n_layers final norm + head
  bool tp_sharded = false;  // this rank's slice of a tensor split over tp (else replicated)
  st::cuda::DeviceBuffer w;     // fp32 master
  st::cuda::DeviceBuffer w16;   // bf16 compute copy
  float* g = nullptr;            // fp32 gradient: a slice of the flat gradient buffer
  int64_t g_off = 0;             // its offset in that buffer (elements)
  st::cuda::DeviceBuffer m, v;  // fp32 AdamW moments
  const bf16* wb() const { return w16.as<const bf16>(); }
  float* gf() const { return g; }
};

// Called (on the host, in backward order) once the backward work producing
// a layer's gradients has been enqueued on the model's stream: layer
// n_layers (final norm + LM head), n_layers-1 .. 0, then -1 (embedding).
using GradsReadyFn = std::function<void(int layer)>;

// Megatron tensor parallelism over an NCCL group (the CPU model's split, so
// the CPU model's tp slices load one to one): wq/wk/wv and w1/w3 by rows
// (heads, ffn), wo and w2 by columns with their outputs all-reduced,
// tok_embeddings and output by vocabulary rows (vocab-parallel embedding,
// head and cross-entropy); norm weights replicated. The column-parallel
// GEMMs' input gradients are all-reduced in backward. No sequence
// parallelism. Collectives are bf16 (activations) or fp32 (statistics), on
// the communicator's stream, ordered with the model's stream both ways.
struct TensorParallel {
  DeviceCommunicator* comm = nullptr;  // null or size 1: no tensor parallelism
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
  explicit CudaLlama(const ModelCfg& cfg, AdamWCfg opt = {}, TensorParallel tp = {});
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
  // One micro-batch: as above, but the gradients are zeroed only when
  // `zero_grads`, and d(loss) is `grad_scale` instead of 1 (1/grad_accum/dp
  // for a mean over micro-batches and data-parallel ranks). `ready` (may be
  // empty) hears each layer's gradients as their backward is enqueued.
  // Returns this micro-batch's mean loss (synchronises after forward only;
  // backward is left running on stream()).
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                         bool full_act_ckpt, bool zero_grads, float grad_scale,
                         const GradsReadyFn& ready);
  // Sum of squares of every gradient, computed on the device after the work
  // enqueued on stream() so far (kept there for optimizer_step's clip),
  // returned on the host (synchronises).
  double grad_sumsq();
  // Global gradient norm clipped to `clip` (<= 0: no clip) on the device,
  // then AdamW on every parameter; refreshes the bf16 copies. `t` is the
  // 1-based optimizer step for bias correction (0: an internal counter).
  // Uses the squared norm of grad_sumsq() when it was called since the last
  // backward, else computes it.
  void optimizer_step(float lr, float clip, int64_t t = 0);

  // The flat gradient buffer and the range [off, off+n) of layer `layer`
  // (-1 embedding, 0..n_layers-1 blocks, n_layers final norm + head).
  float* grads() const { return grads_.as<float>(); }
  int64_t grads_numel() const { return grads_n_; }
  std::pair<int64_t, int64_t> layer_grad_range(int layer) const;

  // Optimizer state of one parameter to and from host memory (fp32, numel
  // values each; m or v may be null to skip). to_host enqueues the copies on
  // `copy` ordered after stream()'s work (pinned destinations make them
  // asynchronous DMA; call copy.sync() before reading); from_host
  // synchronises and refreshes the bf16 copy.
  void state_to_host(const CudaParam& p, float* w, float* m, float* v,
                     st::cuda::CopyStream& copy) const;
  void state_from_host(CudaParam& p, const float* w, const float* m, const float* v);

  std::vector<float> copy_grads_to_host(const std::string& name) const;
  std::vector<float> copy_weights_to_host(const std::string& name) const;

  // Seconds of forward and backward summed over the micro-batches since
  // reset_times() (or the last step_forward_backward), and of the last
  // optimizer step; synchronises.
  const StepTimes& last_times() const;
  void reset_times();
  int64_t peak_device_bytes() const;    // caching allocator's in-use peak
  cudaStream_t stream() const { return stream_.get(); }

 private:
  struct Layer;
  struct Acts;
  CudaParam& param(const std::string& name) const;
  CudaParam* add(const std::string& name, std::vector<int64_t> shape, bool decay, int layer);
  void block_forward(int l, int64_t B, int64_t T, Acts& a, bf16* out);
  void block_backward(int l, int64_t B, int64_t T, Acts& a, bf16* dh);
  void rope_tables(int64_t T);
  // Sum over the tp group in place, in stream order (no-op without tp).
  void tp_sum(bf16* x, int64_t n);
  void tp_sum(float* x, int64_t n);
  void loss_fwd(const bf16* logits, const int32_t* tgt, int64_t N, float* lse, float* row_loss);

  ModelCfg cfg_;
  AdamWCfg opt_;
  DeviceCommunicator* tp_ = nullptr;  // null: no tensor parallelism
  int tp_size_ = 1, tp_rank_ = 0;
  int64_t hq_ = 0, hkv_ = 0, ffn_ = 0, vocab_ = 0, v0_ = 0;  // this rank's share
  st::cuda::Stream stream_;
  GemmLt gemm_;
  CudnnSdpa sdpa_;
  std::vector<std::unique_ptr<CudaParam>> params_;
  CudaParam *tok_emb_ = nullptr, *norm_ = nullptr, *output_ = nullptr;
  std::vector<Layer> layers_;
  st::cuda::DeviceBuffer grads_;  // flat fp32 gradients of every parameter
  int64_t grads_n_ = 0;
  std::vector<std::pair<int64_t, int64_t>> layer_range_;  // index layer + 1
  bool sumsq_valid_ = false;
  st::cuda::DeviceBuffer rope_cos_, rope_sin_, sumsq_;
  int64_t rope_T_ = 0;
  int64_t step_ = 0;
  st::cuda::EventTimer t_fwd_, t_bwd_, t_opt_;
  mutable StepTimes times_;
  mutable bool bwd_pending_ = false, opt_pending_ = false;
};

}  // namespace st::kernels::cuda
