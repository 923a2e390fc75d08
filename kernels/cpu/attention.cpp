// CPU grouped-query attention for cpu_kernels.hpp, blocked: per (batch,
// head) the queries go in tiles of kTile rows, and each tile meets the keys
// it can see (a prefix: kpos ascending) through GEMMs: scores
// S = scale Q K^T, the row softmax (vectorised exp, log-sum-exp kept), then
// O = P V; the backward recomputes P from the saved lse and runs dP = dO V^T,
// dS = P (dP - rowsum(dO O)) scale, dQ += dS K, dK += dS^T Q, dV += P^T dO.
// Written once, for queries against one K/V block with explicit token
// positions (key visible iff kpos <= qpos), which is what ring attention
// (context parallelism) needs; plain causal attention is the block that
// holds the whole sequence. Written once for both storage types: fp32 runs
// the fp32 GEMM; bf16 reads q, k, v, out and dout as stored and runs the
// bf16 GEMM (bf16 x bf16, fp32 accumulate) with the numerics of the GPU's
// fused attention: scores, softmax and the row statistics in fp32, the
// probabilities P and dS rounded to bf16 before the GEMMs that read them,
// out stored as bf16 once. OpenMP over (batch, head) in the forward and
// over (batch, kv head) in the backward, so each thread owns the rows it
// writes; results do not depend on the thread count. Also the log-sum-exp
// merge of partial results.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"

namespace st::kernels {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kTile = 64;  // query rows per tile

// Number of keys visible to a query at position qp (kpos ascending).
inline int64_t visible(const int32_t* kpos, int64_t Tk, int32_t qp) {
  return std::upper_bound(kpos, kpos + Tk, qp) - kpos;
}

// Row softmax of s[0:n) in place given nothing: returns lse of the row.
ST_CPU_CLONES float softmax_row(float* s, int64_t n) {
  float m = kNegInf;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_fast(s[j] - m);
    sum += s[j];
  }
  const float inv = 1.f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  return m + std::log(sum);
}

// p[0:n) = exp(s - lse), rows of a recomputed softmax.
ST_CPU_CLONES void exp_row(float* s, int64_t n, float lse) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] = exp_fast(s[j] - lse);
}

// ds[j] = p[j] * (dp[j] - D) * scale, in place over dp.
ST_CPU_CLONES void dsoftmax_row(const float* p, float* dp, int64_t n, float D, float scale) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - D) * scale;
}

ST_CPU_CLONES float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
ST_CPU_CLONES float dot(const uint16_t* a, const uint16_t* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += to_f32(a[i]) * to_f32(b[i]);
  return s;
}

// x[0:n) as bf16 into y (the probabilities before a bf16 GEMM).
ST_CPU_CLONES void round_row(const float* x, int64_t n, uint16_t* y) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] = from_f32<uint16_t>(x[j]);
}

// The GEMM of the storage type: fp32 sgemm, or bf16 x bf16 with fp32
// accumulation into an fp32 or bf16 C.
void mm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
        const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void mm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
        int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, false);
}
void mm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
        int64_t lda, const uint16_t* B, int64_t ldb, float beta, uint16_t* C, int64_t ldc) {
  gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, true);
}

// A tile of fp32 values (count of them, packed) as the GEMM operand of
// type T: itself for fp32, rounded into `buf` for bf16.
const float* operand(const float* x, int64_t, std::vector<float>&) { return x; }
const uint16_t* operand(const float* x, int64_t count, std::vector<uint16_t>& buf) {
  round_row(x, count, buf.data());
  return buf.data();
}

template <typename T>
void fwd_block(const T* q, const T* k, const T* v, int64_t B, int64_t Tq, int64_t Tk, int64_t Hq,
               int64_t Hkv, int64_t hd, float scale, const int32_t* qpos, const int32_t* kpos,
               T* out, float* lse) {
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const int64_t group = Hq / Hkv;
  const int64_t qs = Hq * hd, ks = Hkv * hd;
#pragma omp parallel if (B * Hq * Tq * Tk * hd / 2 > kMinParallelWork)
  {
    const size_t tile = size_t(std::min(kTile, Tq) * Tk);
    std::vector<float> sbuf(tile);
    std::vector<T> pbuf(std::is_same_v<T, float> ? 0 : tile);
    float* S = sbuf.data();
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        const T* kb = k + b * Tk * ks + (h / group) * hd;
        const T* vb = v + b * Tk * ks + (h / group) * hd;
        for (int64_t t0 = 0; t0 < Tq; t0 += kTile) {
          const int64_t rows = std::min(kTile, Tq - t0);
          const T* qt = q + (b * Tq + t0) * qs + h * hd;
          T* ot = out + (b * Tq + t0) * qs + h * hd;
          // The tile sees at most the keys its last row sees.
          int64_t n = 0;
          for (int64_t t = 0; t < rows; ++t) n = std::max(n, visible(kpos, Tk, qpos[t0 + t]));
          if (n > 0) mm(false, true, rows, n, hd, scale, qt, qs, kb, ks, 0.f, S, n);
          for (int64_t t = 0; t < rows; ++t) {
            const int64_t nt = visible(kpos, Tk, qpos[t0 + t]);
            float* s = S + t * n;
            float& L = lse[(b * Hq + h) * Tq + t0 + t];
            if (nt == 0) {
              L = kNegInf;
              std::fill(s, s + n, 0.f);
              continue;
            }
            L = softmax_row(s, nt);
            std::fill(s + nt, s + n, 0.f);  // keys this row does not see
          }
          if (n > 0) {
            mm(false, false, rows, hd, n, 1.f, operand(S, rows * n, pbuf), n, vb, ks, 0.f, ot, qs);
          } else {
            for (int64_t t = 0; t < rows; ++t) std::fill(ot + t * qs, ot + t * qs + hd, T(0));
          }
        }
      }
  }
}

template <typename T>
ST_CPU_CLONES void lse_merge(T* out, float* lse, const T* out_b, const float* lse_b, int64_t B,
                             int64_t T_, int64_t H, int64_t hd) {
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T_ * hd > kMinParallelWork)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        float& L = lse[(b * H + h) * T_ + t];
        const float Lb = lse_b[(b * H + h) * T_ + t];
        if (Lb == kNegInf) continue;
        T* o = out + (b * T_ + t) * H * hd + h * hd;
        const T* ob = out_b + (b * T_ + t) * H * hd + h * hd;
        if (L == kNegInf) {
          std::copy(ob, ob + hd, o);
          L = Lb;
          continue;
        }
        const float M = std::max(L, Lb);
        const float Ln = M + std::log(std::exp(L - M) + std::exp(Lb - M));
        const float wa = std::exp(L - Ln), wb = std::exp(Lb - Ln);
        for (int64_t i = 0; i < hd; ++i) o[i] = from_f32<T>(wa * to_f32(o[i]) + wb * to_f32(ob[i]));
        L = Ln;
      }
}

template <typename T>
void bwd_block(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* dout,
               int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
               const int32_t* qpos, const int32_t* kpos, float* dq, float* dk, float* dv) {
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const int64_t group = Hq / Hkv;
  const int64_t qs = Hq * hd, ks = Hkv * hd;
  // Each (b, kv head) owns its dk/dv rows and the dq rows of its query heads.
#pragma omp parallel if (B * Hq * Tq * Tk * hd > kMinParallelWork)
  {
    const size_t tile = size_t(std::min(kTile, Tq) * Tk);
    std::vector<float> pbuf(tile), dpbuf(tile);
    std::vector<T> pt(std::is_same_v<T, float> ? 0 : tile), dst(pt.size());
    float *P = pbuf.data(), *dP = dpbuf.data();
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t kh = 0; kh < Hkv; ++kh) {
        const T* kb = k + b * Tk * ks + kh * hd;
        const T* vb = v + b * Tk * ks + kh * hd;
        float* dkb = dk + b * Tk * ks + kh * hd;
        float* dvb = dv + b * Tk * ks + kh * hd;
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
          for (int64_t t0 = 0; t0 < Tq; t0 += kTile) {
            const int64_t rows = std::min(kTile, Tq - t0);
            int64_t n = 0;
            for (int64_t t = 0; t < rows; ++t) n = std::max(n, visible(kpos, Tk, qpos[t0 + t]));
            if (n == 0) continue;
            const int64_t row0 = (b * Tq + t0) * qs + h * hd;
            const T *qt = q + row0, *ot = out + row0, *gt = dout + row0;
            // P = exp(scale Q K^T - lse) on the visible keys, 0 elsewhere.
            mm(false, true, rows, n, hd, scale, qt, qs, kb, ks, 0.f, P, n);
            // dP = dO V^T
            mm(false, true, rows, n, hd, 1.f, gt, qs, vb, ks, 0.f, dP, n);
            for (int64_t t = 0; t < rows; ++t) {
              const int64_t nt = visible(kpos, Tk, qpos[t0 + t]);
              float* p = P + t * n;
              float* dp = dP + t * n;
              if (nt == 0) {
                std::fill(p, p + n, 0.f);
                std::fill(dp, dp + n, 0.f);
                continue;
              }
              exp_row(p, nt, lse[(b * Hq + h) * Tq + t0 + t]);
              std::fill(p + nt, p + n, 0.f);
              const float D = dot(gt + t * qs, ot + t * qs, hd);
              dsoftmax_row(p, dp, nt, D, scale);
              std::fill(dp + nt, dp + n, 0.f);
            }
            // dQ += dS K;  dK += dS^T Q;  dV += P^T dO (fp32 accumulators)
            const T* dS = operand(dP, rows * n, dst);
            mm(false, false, rows, hd, n, 1.f, dS, n, kb, ks, 1.f, dq + row0, qs);
            mm(true, false, n, hd, rows, 1.f, dS, n, qt, qs, 1.f, dkb, ks);
            mm(true, false, n, hd, rows, 1.f, operand(P, rows * n, pt), n, gt, qs, 1.f, dvb, ks);
          }
      }
  }
}

// Causal attention over the whole sequence: one block, positions 0..T-1.
std::vector<int32_t> positions(int64_t T) {
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t);
  return pos;
}
}  // namespace

void attention_fwd_block(const float* q, const float* k, const float* v, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, float* out, float* lse) {
  fwd_block(q, k, v, B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, out, lse);
}
void attention_fwd_block(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t B,
                         int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, uint16_t* out, float* lse) {
  fwd_block(q, k, v, B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, out, lse);
}

void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B,
                         int64_t T, int64_t H, int64_t hd) {
  lse_merge(out, lse, out_b, lse_b, B, T, H, hd);
}
void attention_lse_merge(uint16_t* out, float* lse, const uint16_t* out_b, const float* lse_b,
                         int64_t B, int64_t T, int64_t H, int64_t hd) {
  lse_merge(out, lse, out_b, lse_b, B, T, H, hd);
}

void attention_bwd_block(const float* q, const float* k, const float* v, const float* out,
                         const float* lse, const float* dout, int64_t B, int64_t Tq, int64_t Tk,
                         int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                         const int32_t* kpos, float* dq, float* dk, float* dv) {
  bwd_block(q, k, v, out, lse, dout, B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, dq, dk, dv);
}
void attention_bwd_block(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                         const uint16_t* out, const float* lse, const uint16_t* dout, int64_t B,
                         int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, float* dq, float* dk,
                         float* dv) {
  bwd_block(q, k, v, out, lse, dout, B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, dq, dk, dv);
}

void attention_fwd(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, float* out, float* lse) {
  const auto pos = positions(T);
  fwd_block(q, k, v, B, T, T, Hq, Hkv, hd, scale, pos.data(), pos.data(), out, lse);
}
void attention_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t B, int64_t T,
                   int64_t Hq, int64_t Hkv, int64_t hd, float scale, uint16_t* out, float* lse) {
  const auto pos = positions(T);
  fwd_block(q, k, v, B, T, T, Hq, Hkv, hd, scale, pos.data(), pos.data(), out, lse);
}

void attention_bwd(const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, float* dq, float* dk, float* dv) {
  const auto pos = positions(T);
  std::fill(dq, dq + B * T * Hq * hd, 0.f);
  std::fill(dk, dk + B * T * Hkv * hd, 0.f);
  std::fill(dv, dv + B * T * Hkv * hd, 0.f);
  bwd_block(q, k, v, out, lse, dout, B, T, T, Hq, Hkv, hd, scale, pos.data(), pos.data(), dq, dk,
            dv);
}
void attention_bwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out,
                   const float* lse, const uint16_t* dout, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, uint16_t* dq, uint16_t* dk, uint16_t* dv) {
  // dK and dV sum over the tiles and the query heads of a group: fp32
  // accumulators, rounded to bf16 once at the end.
  const auto pos = positions(T);
  const int64_t nq = B * T * Hq * hd, nk = B * T * Hkv * hd;
  std::vector<float> aq(size_t(nq), 0.f), ak(size_t(nk), 0.f), av(size_t(nk), 0.f);
  bwd_block(q, k, v, out, lse, dout, B, T, T, Hq, Hkv, hd, scale, pos.data(), pos.data(), aq.data(),
            ak.data(), av.data());
  narrow_bf16(aq.data(), nq, dq);
  narrow_bf16(ak.data(), nk, dk);
  narrow_bf16(av.data(), nk, dv);
}
}  // namespace st::kernels
