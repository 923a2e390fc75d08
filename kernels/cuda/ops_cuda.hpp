// The custom CUDA kernels behind the CUDA backend's Ops (cuda_ops.cpp), one
// launcher each, with the semantics and rounding points of kernels/ops.hpp:
// device pointers, bf16 activations (fp32 where ops.hpp says so: parameter
// gradients, statistics, optimizer state), fp32 math, every output rounded
// once when stored, everything enqueued on `s` without waiting.
// Deterministic like the CPU twins: no floating-point atomics; reductions
// into parameter gradients and into the ring-attention accumulators have a
// fixed order. GEMM (cuBLASLt) and the full causal attention (cuDNN) are
// classes, not launchers: gemm_lt.hpp, sdpa_cudnn.hpp.
//   elementwise.cu  casts, add, scale, embedding, RMSNorm, RoPE, SwiGLU
//   attention.cu    the block form of attention ring attention needs
//   loss_optim.cu   vocab-parallel cross-entropy, loss sum, sumsq, AdamW
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/host/launch_limits.hpp"
#include "kernels/ops.hpp"

namespace st::kernels::cuda {
using bf16 = __nv_bfloat16;

// ---- elementwise.cu ----
void cast_f32_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s);
void cast_bf16_f32(const bf16* x, float* y, int64_t n, cudaStream_t s);
void add(bf16* y, const bf16* x, int64_t n, cudaStream_t s);
void add(float* y, const float* x, int64_t n, cudaStream_t s);
void scale(float* x, int64_t n, float a, cudaStream_t s);
// Rows of vocabulary shard [v0, v0 + vl); 0 for a token outside it.
void embedding_fwd(const int32_t* tokens, int64_t rows, const bf16* table, int64_t v0, int64_t vl,
                   int64_t d, bf16* out, cudaStream_t s);
// dtable[tok - v0] += dout[r] for owned tokens, rows in order per column.
void embedding_bwd(const int32_t* tokens, int64_t rows, const bf16* dout, int64_t v0, int64_t vl,
                   int64_t d, float* dtable, cudaStream_t s);
void rmsnorm_fwd(const bf16* x, const bf16* w, int64_t rows, int64_t d, float eps, bf16* y,
                 float* rstd, cudaStream_t s);
void rmsnorm_bwd(const bf16* x, const bf16* w, const float* rstd, const bf16* dy, int64_t rows,
                 int64_t d, bf16* dx, float* dw, bool accumulate, cudaStream_t s);
void rope(bf16* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
          const float* sin_t, bool inverse, cudaStream_t s);
void swiglu_fwd(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t s);
void swiglu_bwd(const bf16* gate, const bf16* up, const bf16* dout, int64_t n, bf16* dgate,
                bf16* dup, cudaStream_t s);
void iota(int32_t* p, int64_t n, cudaStream_t s);  // p[i] = i

// ---- attention.cu (head_dim even and <= kMaxHeadDim) ----
constexpr int64_t kMaxHeadDim = cuda_host::kMaxHeadDim;
void attention_fwd_block(const bf16* q, const bf16* k, const bf16* v, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, bf16* out, float* lse,
                         cudaStream_t s);
void attention_lse_merge(bf16* out, float* lse, const bf16* out_b, const float* lse_b, int64_t B,
                         int64_t T, int64_t H, int64_t hd, cudaStream_t s);
// Adds into the fp32 dq, dk, dv. `drow` is scratch of B*Hq*Tq floats (the
// row sums dout . out, written by the dq kernel and read by the dk/dv one).
void attention_bwd_block(const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                         const float* lse, const bf16* dout, int64_t B, int64_t Tq, int64_t Tk,
                         int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                         const int32_t* kpos, float* dq, float* dk, float* dv, float* drow,
                         cudaStream_t s);

// ---- loss_optim.cu ----
void ce_partial(const bf16* logits, const int32_t* targets, int64_t rows, int64_t V, int64_t v0,
                float* max, float* sumexp, float* tlogit, cudaStream_t s);
void ce_rescale(const float* max, const float* gmax, float* sumexp, int64_t rows, cudaStream_t s);
void ce_finish(const float* gmax, const float* sumexp, const float* tlogit, const int32_t* targets,
               int64_t rows, float* lse, float* row_loss, cudaStream_t s);
void loss_accumulate(const float* row_loss, const int32_t* targets, int64_t rows, double scale,
                     double* acc, cudaStream_t s);
void ce_bwd(const bf16* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t V,
            int64_t v0, float scale, bf16* dlogits, cudaStream_t s);
// Doubles of scratch sumsq() needs for these spans.
int64_t sumsq_scratch(const std::vector<F32Span>& spans);
void sumsq(const std::vector<F32Span>& spans, int groups, double* out, double* scratch,
           cudaStream_t s);
void adamw(const std::vector<AdamWSpan>& spans, const AdamWHyper& h, cudaStream_t s);
}  // namespace st::kernels::cuda
