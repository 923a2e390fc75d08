// The CPU kernels the CPU backend's Ops (ops_cpu.cpp, behind kernels/ops.hpp)
// run. The activation kernels come in fp32 and in bf16 (uint16_t bits)
// overloads: the bf16 ones read and write bf16 as stored, with fp32 math in
// registers and one rounding per stored output (the CUDA kernels' rounding
// points); parameter gradients and statistics stay fp32.
// Host pointers; each call runs to completion on the calling thread (with an
// OpenMP team when the work is large enough).
//
// Conventions (all ops):
//  - Tensors are contiguous row-major; "rows" is the flattened leading size
//    (B*T for activations).
//  - Activation layouts: x [rows, d]; q [B, T, Hq, hd]; k, v [B, T, Hkv, hd]
//    (i.e. the [rows, H*hd] output of a linear layer, viewed per head).
//  - Backward ops OVERWRITE activation gradients (dx, dq, ...) unless an
//    `accumulate` flag says otherwise, and ADD INTO parameter gradients
//    (dw, dtable), so gradients of a step accumulate in place.
//  - Every op is deterministic: the same inputs give bitwise the same outputs
//    for a given thread count (recomputation for activation checkpointing
//    relies on this). Reductions over rows into parameter gradients do not
//    depend on the thread count.
#pragma once
#include <cstdint>
#include <string>

namespace st::kernels {

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M,K], op(B)
// is [K,N]. lda/ldb/ldc are row strides of A, B, C as stored.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// Same, packed (lda = trans_a ? M : K, ldb = trans_b ? K : N, ldc = N).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);

// What the fp32 GEMM runs on, for run.json and the log, e.g. "OpenBLAS
// 0.3.21 ... (core SkylakeX)". Says so when the library picked a generic
// kernel on a CPU that has AVX2 (OpenBLAS falls back to Prescott on CPUs it
// does not recognise; OPENBLAS_CORETYPE overrides it), without a speed claim.
std::string gemm_library();

// bf16 GEMM, the layout of gemm: A and B hold bf16 bits, products are
// accumulated in fp32, C is fp32 or (c_bf16) bf16, rounded once when stored
// after alpha and beta * C. gemm_bf16 runs oneDNN's matmul where the build
// has oneDNN and the CPU multiplies bf16 in hardware (AVX512-BF16, AMX), and
// otherwise widens the operands to fp32 for gemm (the same products: a bf16
// times a bf16 is exact in fp32; only the summation order differs).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, void* C,
               int64_t ldc, bool c_bf16);
// The two implementations gemm_bf16 picks from (tests run each).
// gemm_bf16_onednn throws where gemm_bf16_native() is false.
void gemm_bf16_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                      void* C, int64_t ldc, bool c_bf16);
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                       void* C, int64_t ldc, bool c_bf16);
// Whether gemm_bf16 runs oneDNN (decided once per process: built with
// oneDNN, and oneDNN's instruction set for this CPU, which DNNL_MAX_CPU_ISA
// may lower, multiplies bf16 in hardware).
bool gemm_bf16_native();
// What gemm_bf16 runs on, for run.json and the log: oneDNN's version, its
// instruction set and the implementation of a 768^3 matmul (impl_info_str,
// e.g. "oneDNN 2.6.3, isa avx512_core_bf16, brg:avx512_core_bf16"), or the
// widening fallback and why it was chosen.
std::string gemm_bf16_library();

// bf16 <-> fp32 over n elements (OpenMP and SIMD for large n): widening is
// exact; narrowing rounds to nearest even, NaN stays NaN (tensor/dtype.hpp's
// scalar f32_to_bf16, bit for bit).
void widen_bf16(const uint16_t* x, int64_t n, float* y);
void narrow_bf16(const float* x, int64_t n, uint16_t* y);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
void add_inplace(uint16_t* y, const uint16_t* x, int64_t n);

// out[r, :] = table[tokens[r], :]; tokens must be in [0, vocab).
void embedding_fwd(const int32_t* tokens, int64_t rows, const float* table, int64_t vocab,
                   int64_t d, float* out);
// dtable[tokens[r], :] += dout[r, :]  (deterministic: no atomics).
void embedding_bwd(const int32_t* tokens, int64_t rows, const float* dout, int64_t vocab, int64_t d,
                   float* dtable);

// Vocab-parallel embedding shard: table holds rows [v0, v0+vl) of the
// vocabulary; rows whose token is outside get 0 (the tp all-reduce fills
// them from the owning rank). Backward adds only the owned rows.
void embedding_fwd_shard(const int32_t* tokens, int64_t rows, const float* table, int64_t v0,
                         int64_t vl, int64_t d, float* out);
void embedding_fwd_shard(const int32_t* tokens, int64_t rows, const uint16_t* table, int64_t v0,
                         int64_t vl, int64_t d, uint16_t* out);
void embedding_bwd_shard(const int32_t* tokens, int64_t rows, const float* dout, int64_t v0,
                         int64_t vl, int64_t d, float* dtable);
void embedding_bwd_shard(const int32_t* tokens, int64_t rows, const uint16_t* dout, int64_t v0,
                         int64_t vl, int64_t d, float* dtable);

// y = x * rstd * w, rstd[r] = 1 / sqrt(mean_j x[r,j]^2 + eps). rstd: [rows].
void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                 float* rstd);
void rmsnorm_fwd(const uint16_t* x, const uint16_t* w, int64_t rows, int64_t d, float eps,
                 uint16_t* y, float* rstd);
// dx (= or += when accumulate) and dw (+=) from dy, x, w and the saved rstd.
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                 int64_t d, float* dx, float* dw, bool accumulate);
void rmsnorm_bwd(const uint16_t* x, const uint16_t* w, const float* rstd, const uint16_t* dy,
                 int64_t rows, int64_t d, uint16_t* dx, float* dw, bool accumulate);

// RoPE, interleaved pairs (x[2i], x[2i+1]) as in Meta's Llama reference
// (view_as_complex): angle(t, i) = (pos0 + t) * theta^(-2i/hd).
// Tables cos/sin: [T, hd/2], built by rope_table.
void rope_table(int64_t T, int64_t hd, double theta, int64_t pos0, float* cos_t, float* sin_t);
// In place on x [B, T, H, hd] (hd even): rotate each pair by +angle.
void rope_fwd(float* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t);
void rope_fwd(uint16_t* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t);
// In place on dx [B, T, H, hd]: rotate by -angle (the transpose of rope_fwd).
void rope_bwd(float* dx, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t);
void rope_bwd(uint16_t* dx, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t);

// out = silu(gate) * up, elementwise over n.
void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out);
void swiglu_fwd(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out);
// dgate, dup (overwritten) from dout. dgate may alias gate, dup may alias up
// only if both alias (then gate/up are consumed).
void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                float* dup);
void swiglu_bwd(const uint16_t* gate, const uint16_t* up, const uint16_t* dout, int64_t n,
                uint16_t* dgate, uint16_t* dup);

// Causal grouped-query attention, softmax(q k^T * scale) v with
// max-subtraction; query head h reads kv head h / (Hq / Hkv).
// q: [B,T,Hq,hd], k,v: [B,T,Hkv,hd], out: [B,T,Hq,hd],
// lse: [B,Hq,T] log-sum-exp of the scaled scores (saved for backward).
// Every attention op comes in fp32 and in bf16 (uint16_t bits): the bf16
// one reads and writes bf16 as stored and multiplies through gemm_bf16
// (fp32 accumulation); scores, softmax and lse are fp32 and the
// probabilities (and dS) are rounded to bf16 before the GEMM that reads
// them, as the GPU's fused attention does.
void attention_fwd(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, float* out, float* lse);
void attention_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t B, int64_t T,
                   int64_t Hq, int64_t Hkv, int64_t hd, float scale, uint16_t* out, float* lse);
// dq, dk, dv overwritten. Needs q, k, v, out, lse from the forward.
void attention_bwd(const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, float* dq, float* dk, float* dv);
void attention_bwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out,
                   const float* lse, const uint16_t* dout, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, uint16_t* dq, uint16_t* dk, uint16_t* dv);

// Attention of queries against one K/V block, for ring attention (context
// parallelism): q [B,Tq,Hq,hd], k,v [B,Tk,Hkv,hd]; query t sees key s iff
// kpos[s] <= qpos[t] (global token positions; kpos ascending). out is the
// attention output within the block, lse [B,Hq,Tq] its log-sum-exp; a query
// that sees no key gets out = 0, lse = -inf.
void attention_fwd_block(const float* q, const float* k, const float* v, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, float* out, float* lse);
void attention_fwd_block(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t B,
                         int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, uint16_t* out, float* lse);
// Online-softmax merge: (out, lse) := combination of (out, lse) and (out_b,
// lse_b), both normalized partial results over disjoint key sets. out:
// [B,T,H,hd], lse: [B,H,T]; -inf marks "no keys".
void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B,
                         int64_t T, int64_t H, int64_t hd);
void attention_lse_merge(uint16_t* out, float* lse, const uint16_t* out_b, const float* lse_b,
                         int64_t B, int64_t T, int64_t H, int64_t hd);
// Backward of one block given the FINAL out and lse (over all blocks):
// ADDS into the fp32 accumulators dq [B,Tq,Hq,hd], dk and dv [B,Tk,Hkv,hd].
void attention_bwd_block(const float* q, const float* k, const float* v, const float* out,
                         const float* lse, const float* dout, int64_t B, int64_t Tq, int64_t Tk,
                         int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                         const int32_t* kpos, float* dq, float* dk, float* dv);
void attention_bwd_block(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                         const uint16_t* out, const float* lse, const uint16_t* dout, int64_t B,
                         int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, float* dq, float* dk, float* dv);

// Softmax cross-entropy over a vocabulary shard, in the three steps of
// Ops::ce_partial / ce_rescale / ce_finish (kernels/ops.hpp): logits [rows,
// V] hold vocabulary columns [v0, v0 + V); targets are global ids, < 0
// ignored. Throws for a target >= v0 + V when v0 == 0 and the shard is the
// whole vocabulary (full == true).
void ce_partial(const float* logits, const int32_t* targets, int64_t rows, int64_t V, int64_t v0,
                float* max, float* sumexp, float* tlogit);
void ce_partial(const uint16_t* logits, const int32_t* targets, int64_t rows, int64_t V, int64_t v0,
                float* max, float* sumexp, float* tlogit);
void ce_rescale(const float* max, const float* gmax, float* sumexp, int64_t rows);
void ce_finish(const float* gmax, const float* sumexp, const float* tlogit, const int32_t* targets,
               int64_t rows, float* lse, float* row_loss);
// sum over rows with a target of row_loss (double, fixed order).
double loss_sum(const float* row_loss, const int32_t* targets, int64_t rows);
// dlogits = (softmax - onehot) * scale from the global lse; ignored rows 0;
// dlogits may alias logits.
void ce_bwd(const float* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t V,
            int64_t v0, float scale, float* dlogits);
void ce_bwd(const uint16_t* logits, const int32_t* targets, const float* lse, int64_t rows,
            int64_t V, int64_t v0, float scale, uint16_t* dlogits);

// AdamW on fp32 master weights with decoupled weight decay, the formula of
// kernels/ops.hpp's AdamWHyper (g scaled by grad_scale first; bc1, bc2 the
// bias corrections of `step`, counting from 1).
void adamw_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t step, float grad_scale = 1.f);
// The same step on bf16 weights and moments (optim.state_dtype=bf16): fp32
// math, each of w, m, v stored with stochastic rounding from the stream
// sround::stream(seed, key) at positions pos0 + i (kernels/stochastic_round.hpp).
void adamw_step_bf16(uint16_t* w, const float* g, uint16_t* m, uint16_t* v, int64_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int64_t step,
                     float grad_scale, uint32_t seed, uint32_t key, int64_t pos0);

}  // namespace st::kernels
