// The CUDA twins of kernels/ops.hpp: the same ops on device pointers, with
// bf16 storage for activations and compute weights, fp32 for parameter
// gradients, master weights, optimizer state and statistics (rstd, lse),
// fp32 math everywhere, and an explicit stream. Each op is tested against
// its CPU twin in kernels/cpu (ctest/cuda/test_cuda_kernels.cpp).
//
// Conventions beyond ops.hpp:
//  - All pointers are device pointers unless named *_host.
//  - Everything is enqueued on `stream` and returns without synchronising,
//    except cross_entropy_loss (it returns a host float).
//  - Deterministic like the CPU twins: no floating-point atomics; reductions
//    into parameter gradients use a fixed summation order.
//  - GEMM (cuBLASLt) and attention (cuDNN) are classes, not free functions,
//    because they own handles, workspaces and per-shape caches: gemm_lt.hpp,
//    sdpa_cudnn.hpp.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace st::kernels::cuda {
using bf16 = __nv_bfloat16;

// Casts (n elements).
void cast_f32_to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(const bf16* x, float* y, int64_t n, cudaStream_t stream);

// y[i] += x[i]
void add_inplace(bf16* y, const bf16* x, int64_t n, cudaStream_t stream);

// out[r, :] = table[tokens[r], :]. Tokens outside [0, vocab) give a row of NaN
// (the CPU twin throws; a device op cannot, and NaN makes the loss say so).
void embedding_fwd(const int32_t* tokens, int64_t rows, const bf16* table, int64_t vocab, int64_t d,
                   bf16* out, cudaStream_t stream);
// dtable[tokens[r], :] += dout[r, :] in row order per column (deterministic).
void embedding_bwd(const int32_t* tokens, int64_t rows, const bf16* dout, int64_t vocab, int64_t d,
                   float* dtable, cudaStream_t stream);
// Vocab-parallel shard (tensor parallelism): table holds rows [v0, v0+vl);
// rows whose token is outside get 0 (the tp all-reduce fills them from the
// owning rank); backward adds only the owned rows. Twins of
// kernels::embedding_fwd_shard / embedding_bwd_shard.
void embedding_fwd_shard(const int32_t* tokens, int64_t rows, const bf16* table, int64_t v0,
                         int64_t vl, int64_t d, bf16* out, cudaStream_t stream);
void embedding_bwd_shard(const int32_t* tokens, int64_t rows, const bf16* dout, int64_t v0,
                         int64_t vl, int64_t d, float* dtable, cudaStream_t stream);

// y = x * rstd * w; rstd [rows] fp32.
void rmsnorm_fwd(const bf16* x, const bf16* w, int64_t rows, int64_t d, float eps, bf16* y,
                 float* rstd, cudaStream_t stream);
// dx (= or += when accumulate), dw (+=, fp32).
void rmsnorm_bwd(const bf16* x, const bf16* w, const float* rstd, const bf16* dy, int64_t rows,
                 int64_t d, bf16* dx, float* dw, bool accumulate, cudaStream_t stream);

// RoPE tables cos/sin [T, hd/2] fp32 (computed in double, like the CPU twin).
void rope_table(int64_t T, int64_t hd, double theta, int64_t pos0, float* cos_t, float* sin_t,
                cudaStream_t stream);
// In place on x [B, T, H, hd], interleaved pairs: rotate by +angle / -angle.
void rope_fwd(bf16* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t, cudaStream_t stream);
void rope_bwd(bf16* dx, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t, cudaStream_t stream);

// out = silu(gate) * up; backward overwrites dgate, dup (may alias gate, up).
void swiglu_fwd(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream);
void swiglu_bwd(const bf16* gate, const bf16* up, const bf16* dout, int64_t n, bf16* dgate,
                bf16* dup, cudaStream_t stream);

// Softmax cross-entropy over logits [rows, V] (bf16, contiguous).
// Forward: lse [rows] and row_loss [rows] (lse - logit[target], 0 for ignored
// targets < 0). No host synchronisation.
void cross_entropy_fwd(const bf16* logits, const int32_t* targets, int64_t rows, int64_t V,
                       float* lse, float* row_loss, cudaStream_t stream);
// Mean of row_loss over non-ignored targets, summed in double in a fixed
// order; synchronises `stream` and returns it on the host (like the CPU twin).
float cross_entropy_loss(const float* row_loss, const int32_t* targets, int64_t rows,
                         int64_t* n_valid, cudaStream_t stream);
// dlogits = (softmax - onehot) * dloss / n_valid; may alias logits. With a
// vocabulary shard, logits holds columns [v0, v0 + V) of the full vocabulary
// and targets stay global ids (v0 = 0 for the unsharded case).
void cross_entropy_bwd(const bf16* logits, const int32_t* targets, const float* lse, int64_t rows,
                       int64_t V, int64_t v0, int64_t n_valid, float dloss, bf16* dlogits,
                       cudaStream_t stream);

// Vocab-parallel forward (Megatron style), logits shard [rows, V] holding
// global columns [v0, v0 + V):
//  1. vp_partial: row max, sum exp(x - max) and the target logit (0 if the
//     target is not in this shard).
//  2. caller: all-reduce MAX of max into gmax.
//  3. vp_rescale: sumexp *= exp(max - gmax).
//  4. caller: all-reduce SUM of sumexp and target_logit.
//  5. vp_finish: lse = gmax + log(sumexp), row_loss = lse - target_logit.
void cross_entropy_vp_partial(const bf16* logits, const int32_t* targets, int64_t rows, int64_t V,
                              int64_t v0, float* max, float* sumexp, float* target_logit,
                              cudaStream_t stream);
void cross_entropy_vp_rescale(const float* max, const float* gmax, float* sumexp, int64_t rows,
                              cudaStream_t stream);
void cross_entropy_vp_finish(const float* gmax, const float* sumexp, const float* target_logit,
                             const int32_t* targets, int64_t rows, float* lse, float* row_loss,
                             cudaStream_t stream);

// Multi-tensor AdamW on fp32 master weights (same update as the CPU
// adamw_step), with the gradient clip coefficient computed on the device
// from a global squared norm, so no host round-trip:
//   coef = (max_norm > 0 && isfinite(norm) && norm > max_norm) ? max_norm / (norm + 1e-6) : 1
// (lib/optim's clip_coef), g' = g * coef. w_bf16 (optional) receives the new
// compute copy of the weights.
struct AdamWTensor {
  float* w = nullptr;
  const float* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  bf16* w_bf16 = nullptr;  // may be null
  int64_t n = 0;
  float weight_decay = 0.f;
};
// Sum of squares of every gradient into *sumsq (fp32, overwritten),
// deterministic; the caller all-reduces it over ranks before adamw_multi.
void multi_tensor_sumsq(const std::vector<const float*>& grads, const std::vector<int64_t>& sizes,
                        float* sumsq, cudaStream_t stream);
// grad_sumsq: device pointer to the global sum of squares (nullptr: no clip).
void adamw_multi(const std::vector<AdamWTensor>& tensors, float lr, float beta1, float beta2,
                 float eps, int64_t step, const float* grad_sumsq, float max_norm,
                 cudaStream_t stream);

}  // namespace st::kernels::cuda
