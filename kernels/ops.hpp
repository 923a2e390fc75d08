// The Ops seam: every compute kernel the model, the engine and the optimizer
// run, with one signature for every backend. The CPU implementation
// (kernels/cpu/ops_cpu.cpp) is always built and is the reference; the CUDA
// one lives in the CUDA backend library (kernels/cuda) and is checked op by
// op against it (ctest/backend/test_ops_backends.cpp).
//
// Conventions (all ops):
//  - Pointers are device pointers of the backend's Device; every op is
//    enqueued on the stream `s` and returns without waiting for it.
//  - Row-major, contiguous. Activation layouts: x [rows, d]; q [B, T, Hq, hd];
//    k, v [B, T, Hkv, hd] (the [rows, H*hd] output of a linear layer).
//  - `t` is the activation dtype (the compute precision: F32 or BF16).
//    Parameter gradients, RMSNorm's rstd, attention's lse, the cross-entropy
//    statistics and the optimizer state are always F32. Math is fp32 on
//    every backend; a bf16 output is rounded once, when it is stored (so the
//    CPU backend's bf16 path rounds where the CUDA kernels do).
//  - Backward ops OVERWRITE activation gradients unless `accumulate` says
//    otherwise, and ADD INTO parameter gradients.
//  - Deterministic forward: the same inputs give bitwise the same outputs
//    (activation checkpointing's recomputation relies on it). Backward ops
//    too, and reductions into parameter gradients do not depend on the
//    thread count, with one exception: causal attention's backward on the
//    CUDA backend's cuDNN path (runtime.attention_backward=fast, the
//    default) accumulates dQ with atomics, so two identical steps there may
//    differ in the last bits of the gradients. =deterministic runs cuDNN's
//    deterministic backward on Hopper (sm_9x: no shared dQ accumulator; not
//    yet run on a GPU) and the block kernels elsewhere; the CPU backend is
//    bitwise repeatable; docs/cuda.md.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/device.hpp"
#include "tensor/dtype.hpp"

namespace st {

// One tensor of a multi-tensor AdamW step: master weights w and moments m,
// v of dtype state_t (fp32, or bf16 for optim.state_dtype=bf16: stored with
// stochastic rounding, kernels/stochastic_round.hpp, whose random stream is
// (AdamWHyper::rng_seed, rng_key) at positions rng_pos + i), the fp32
// gradient, and optionally the compute copy to refresh (wc of dtype wc_t).
struct AdamWSpan {
  void* w = nullptr;
  const float* g = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  DType state_t = DType::F32;
  void* wc = nullptr;
  DType wc_t = DType::BF16;
  int64_t n = 0;
  bool decay = true;
  uint32_t rng_key = 0;  // the piece's stream (its tensor and tp block)
  int64_t rng_pos = 0;   // position of w[0] in that stream (its offset in the block)
};

// AdamW with decoupled weight decay; one formula on every backend:
//   g' = g * grad_scale
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   w = w - lr * (wd * w + (m / bc1) / (sqrt(v / bc2) + eps))
// with bc1 = 1 - b1^step, bc2 = 1 - b2^step (computed in double, used as
// fp32), wd = weight_decay for spans with decay, else 0; step counts from 1.
// The math is fp32 whatever the state's dtype; bf16 state is read widened
// and each of w, m, v stored once, rounded stochastically.
struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;
  float grad_scale = 1;   // the clip coefficient
  uint32_t rng_seed = 0;  // this step's stochastic-rounding seed (bf16 state)
};

// A span of fp32 values in one of several sums (gradient norms).
struct F32Span {
  const float* p = nullptr;
  int64_t n = 0;
  int group = 0;
};

// Seconds spent in each kind of kernel since the last take_kernel_seconds()
// (backends that time their kernels: the CPU one; others report nothing).
struct KernelSeconds {
  double gemm = 0, attention = 0, elementwise = 0, optimizer = 0;
  bool known = false;
};

// Which implementation each call ran since the last take_paths(), calls per
// path name (no silent fallback; the step record's `paths`, docs/telemetry.md):
// attention_fwd / attention_bwd count the full causal ops ("cpu"; CUDA:
// "cudnn", "block" when cuDNN could not take the shape, "block_chosen" for
// runtime.attention_backward=deterministic where cuDNN has no deterministic
// backward) and the ring-attention blocks
// ("ring_block"); gemm counts GEMMs ("cpu_fp32", "cpu_bf16"; CUDA:
// "cublaslt_h<i>", the i-th cuBLASLt heuristic result, 0 the first choice).
struct OpPaths {
  std::map<std::string, int64_t> attention_fwd, attention_bwd, gemm;
  bool known = false;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string describe() const = 0;  // what the GEMM and attention run on
  virtual KernelSeconds take_kernel_seconds() { return {}; }
  virtual OpPaths take_paths() { return {}; }

  // C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is [M,K], op(B) is [K,N];
  // lda/ldb/ldc are row strides as stored. A and B have dtype `ab`; C has
  // dtype `c` (F32, or the same as ab). Accumulation is fp32.
  virtual void gemm(Stream& s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, DType ab,
                    float beta, void* C, int64_t ldc, DType c) = 0;

  // y = x converted (n elements).
  virtual void cast(Stream& s, const void* x, DType xt, void* y, DType yt, int64_t n) = 0;
  // y += x
  virtual void add(Stream& s, void* y, const void* x, int64_t n, DType t) = 0;
  // x *= a (fp32)
  virtual void scale(Stream& s, float* x, int64_t n, float a) = 0;

  // Embedding of vocabulary rows [v0, v0 + vl) (the whole table: v0 = 0,
  // vl = vocab; a tensor-parallel shard otherwise): out[r] = table[tok[r] -
  // v0], or 0 when the token is outside the shard (the tp reduction fills it
  // from its owner). Tokens are checked by the caller. Backward adds the
  // owned rows into dtable (fp32) in row order.
  virtual void embedding_fwd(Stream& s, const int32_t* tokens, int64_t rows, const void* table,
                             int64_t v0, int64_t vl, int64_t d, void* out, DType t) = 0;
  virtual void embedding_bwd(Stream& s, const int32_t* tokens, int64_t rows, const void* dout,
                             int64_t v0, int64_t vl, int64_t d, float* dtable, DType t) = 0;

  // y = x * rstd * w, rstd[r] = 1 / sqrt(mean_j x[r,j]^2 + eps) (fp32).
  virtual void rmsnorm_fwd(Stream& s, const void* x, const void* w, int64_t rows, int64_t d,
                           float eps, void* y, float* rstd, DType t) = 0;
  // dx (= or += when accumulate) and dw (fp32, +=).
  virtual void rmsnorm_bwd(Stream& s, const void* x, const void* w, const float* rstd,
                           const void* dy, int64_t rows, int64_t d, void* dx, float* dw,
                           bool accumulate, DType t) = 0;

  // RoPE in place on x [B, T, H, hd], interleaved pairs (x[2i], x[2i+1]) as
  // Meta's Llama reference; cos/sin [T, hd/2] fp32 (docs/model.md). inverse:
  // rotate by -angle (the backward).
  virtual void rope(Stream& s, void* x, int64_t B, int64_t T, int64_t H, int64_t hd,
                    const float* cos_t, const float* sin_t, bool inverse, DType t) = 0;

  // out = silu(gate) * up. Backward overwrites dgate and dup, which may alias
  // gate and up (both or neither).
  virtual void swiglu_fwd(Stream& s, const void* gate, const void* up, int64_t n, void* out,
                          DType t) = 0;
  virtual void swiglu_bwd(Stream& s, const void* gate, const void* up, const void* dout, int64_t n,
                          void* dgate, void* dup, DType t) = 0;

  // Causal grouped-query attention over the whole sequence, softmax(q k^T *
  // scale) v; query head h reads kv head h / (Hq / Hkv); lse [B, Hq, T] is
  // the log-sum-exp of the scaled scores (kept for backward). Backward
  // overwrites dq, dk, dv.
  virtual void attention_fwd(Stream& s, const void* q, const void* k, const void* v, int64_t B,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale, void* out,
                             float* lse, DType t) = 0;
  virtual void attention_bwd(Stream& s, const void* q, const void* k, const void* v,
                             const void* out, const float* lse, const void* dout, int64_t B,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale, void* dq,
                             void* dk, void* dv, DType t) = 0;
  // The block form ring attention needs: queries [B,Tq] against one K/V
  // block [B,Tk]; query t sees key j iff kpos[j] <= qpos[t] (global token
  // positions, device int32, kpos ascending); a query that sees no key gets
  // out = 0, lse = -inf.
  virtual void attention_fwd_block(Stream& s, const void* q, const void* k, const void* v,
                                   int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv,
                                   int64_t hd, float scale, const int32_t* qpos,
                                   const int32_t* kpos, void* out, float* lse, DType t) = 0;
  // (out, lse) := the log-sum-exp merge of (out, lse) and (out_b, lse_b),
  // partial results over disjoint key sets; out [B,T,H,hd], lse [B,H,T].
  virtual void attention_lse_merge(Stream& s, void* out, float* lse, const void* out_b,
                                   const float* lse_b, int64_t B, int64_t T, int64_t H, int64_t hd,
                                   DType t) = 0;
  // Backward of one block from the FINAL out and lse: ADDS into the fp32
  // accumulators dq [B,Tq,Hq,hd], dk and dv [B,Tk,Hkv,hd].
  virtual void attention_bwd_block(Stream& s, const void* q, const void* k, const void* v,
                                   const void* out, const float* lse, const void* dout, int64_t B,
                                   int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd,
                                   float scale, const int32_t* qpos, const int32_t* kpos, float* dq,
                                   float* dk, float* dv, DType t) = 0;

  // Softmax cross-entropy over a vocabulary shard: logits [rows, V] hold
  // columns [v0, v0 + V) of the vocabulary (v0 = 0 and V the whole
  // vocabulary without tensor parallelism: the one-shard case). Targets are
  // global ids; < 0 means ignored.
  //  1. ce_partial: row max, sum of exp(x - max), and the target's logit (0
  //     when another shard holds it).
  //  2. (tp > 1) the caller all-reduces max into gmax (MAX), ce_rescale
  //     rescales sumexp to gmax, the caller all-reduces sumexp and tlogit (SUM).
  //  3. ce_finish: lse = gmax + log(sumexp), row_loss = lse - tlogit (0 for
  //     ignored rows).
  virtual void ce_partial(Stream& s, const void* logits, const int32_t* targets, int64_t rows,
                          int64_t V, int64_t v0, float* max, float* sumexp, float* tlogit,
                          DType t) = 0;
  virtual void ce_rescale(Stream& s, const float* max, const float* gmax, float* sumexp,
                          int64_t rows) = 0;
  virtual void ce_finish(Stream& s, const float* gmax, const float* sumexp, const float* tlogit,
                         const int32_t* targets, int64_t rows, float* lse, float* row_loss) = 0;
  // acc[0] += scale * sum of row_loss over rows with a target (in double,
  // fixed order); acc is a device double.
  virtual void loss_accumulate(Stream& s, const float* row_loss, const int32_t* targets,
                               int64_t rows, double scale, double* acc) = 0;
  // dlogits = (softmax - onehot(target)) * scale, 0 for ignored rows; may
  // alias logits.
  virtual void ce_bwd(Stream& s, const void* logits, const int32_t* targets, const float* lse,
                      int64_t rows, int64_t V, int64_t v0, float scale, void* dlogits, DType t) = 0;

  // out[g] = sum of squares of the spans of group g, g < groups (device
  // doubles, overwritten), for gradient norms.
  virtual void sumsq(Stream& s, const std::vector<F32Span>& spans, int groups, double* out) = 0;
  virtual void adamw(Stream& s, const std::vector<AdamWSpan>& spans, const AdamWHyper& h) = 0;
};

// The CPU implementation (always built).
Ops& cpu_ops();

// RoPE angle tables for the given token positions: cos/sin [n, hd/2] with
// angle(p, i) = p * theta^(-2i/hd), computed in double (host; the model
// copies them to its device).
void rope_tables(const int32_t* positions, int64_t n, int64_t hd, double theta, float* cos_t,
                 float* sin_t);
}  // namespace st
