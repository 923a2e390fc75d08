// CPU grouped-query attention for kernels/ops.hpp, flash-style: the forward
// keeps only the output and the per-row log-sum-exp; the backward recomputes
// the probabilities from q, k and lse. Written once, for queries against one
// K/V block with explicit token positions (key visible iff kpos <= qpos,
// kpos ascending), which is what ring attention (context parallelism) needs;
// plain causal attention is the block that holds the whole sequence. OpenMP
// over (batch, head) in the forward and over (batch, kv head) in the
// backward, so each thread owns the dk/dv rows it writes. Also the
// log-sum-exp merge of partial results.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

// The score/output loops are dot products and axpys over hd; the portable
// build targets baseline x86-64, so compile AVX2 and AVX-512 clones as well
// and let the loader pick one for the CPU it runs on.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ST_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ST_CPU_CLONES
#endif

namespace st::kernels {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
inline void axpy(float a, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
// Number of keys visible to a query at position qp (kpos ascending).
inline int64_t visible(const int32_t* kpos, int64_t Tk, int32_t qp) {
  return std::upper_bound(kpos, kpos + Tk, qp) - kpos;
}
}  // namespace

ST_CPU_CLONES void attention_fwd_block(const float* q, const float* k, const float* v, int64_t B,
                                       int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd,
                                       float scale, const int32_t* qpos, const int32_t* kpos,
                                       float* out, float* lse) {
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const int64_t group = Hq / Hkv;
  const int64_t qs = Hq * hd, ks = Hkv * hd;
#pragma omp parallel if (B * Hq * Tq * Tk * hd / 2 > kMinParallelWork)
  {
    std::vector<float> pbuf(static_cast<size_t>(Tk));
    float* p = pbuf.data();
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / group;
        const float* kb = k + b * Tk * ks + kh * hd;
        const float* vb = v + b * Tk * ks + kh * hd;
        for (int64_t t = 0; t < Tq; ++t) {
          const float* qt = q + (b * Tq + t) * qs + h * hd;
          float* ot = out + (b * Tq + t) * qs + h * hd;
          std::fill(ot, ot + hd, 0.f);
          const int64_t n = visible(kpos, Tk, qpos[t]);
          if (n == 0) {
            lse[(b * Hq + h) * Tq + t] = kNegInf;
            continue;
          }
          float m = kNegInf;
          for (int64_t s = 0; s < n; ++s) {
            p[s] = scale * dot(qt, kb + s * ks, hd);
            m = std::max(m, p[s]);
          }
          float sum = 0.f;
          for (int64_t s = 0; s < n; ++s) {
            p[s] = std::exp(p[s] - m);
            sum += p[s];
          }
          const float inv = 1.f / sum;
          for (int64_t s = 0; s < n; ++s) axpy(p[s] * inv, vb + s * ks, ot, hd);
          lse[(b * Hq + h) * Tq + t] = m + std::log(sum);
        }
      }
  }
}

void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B,
                         int64_t T, int64_t H, int64_t hd) {
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * hd > kMinParallelWork)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        float& L = lse[(b * H + h) * T + t];
        const float Lb = lse_b[(b * H + h) * T + t];
        if (Lb == kNegInf) continue;
        float* o = out + (b * T + t) * H * hd + h * hd;
        const float* ob = out_b + (b * T + t) * H * hd + h * hd;
        if (L == kNegInf) {
          std::copy(ob, ob + hd, o);
          L = Lb;
          continue;
        }
        const float M = std::max(L, Lb);
        const float Ln = M + std::log(std::exp(L - M) + std::exp(Lb - M));
        const float wa = std::exp(L - Ln), wb = std::exp(Lb - Ln);
        for (int64_t i = 0; i < hd; ++i) o[i] = wa * o[i] + wb * ob[i];
        L = Ln;
      }
}

ST_CPU_CLONES void attention_bwd_block(const float* q, const float* k, const float* v,
                                       const float* out, const float* lse, const float* dout,
                                       int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv,
                                       int64_t hd, float scale, const int32_t* qpos,
                                       const int32_t* kpos, float* dq, float* dk, float* dv) {
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const int64_t group = Hq / Hkv;
  const int64_t qs = Hq * hd, ks = Hkv * hd;
  // Each (b, kv head) owns its dk/dv rows and the dq rows of its query heads.
#pragma omp parallel for collapse(2) schedule(static) if (B * Hq * Tq * Tk * hd > kMinParallelWork)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      const float* kb = k + b * Tk * ks + kh * hd;
      const float* vb = v + b * Tk * ks + kh * hd;
      float* dkb = dk + b * Tk * ks + kh * hd;
      float* dvb = dv + b * Tk * ks + kh * hd;
      for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
        for (int64_t t = 0; t < Tq; ++t) {
          const int64_t n = visible(kpos, Tk, qpos[t]);
          if (n == 0) continue;
          const int64_t row = (b * Tq + t) * qs + h * hd;
          const float* qt = q + row;
          const float* dot_ = dout + row;
          float* dqt = dq + row;
          const float L = lse[(b * Hq + h) * Tq + t];
          const float D = dot(dot_, out + row, hd);
          for (int64_t s = 0; s < n; ++s) {
            const float p = std::exp(scale * dot(qt, kb + s * ks, hd) - L);
            const float dp = dot(dot_, vb + s * ks, hd);
            const float ds = p * (dp - D) * scale;
            axpy(ds, kb + s * ks, dqt, hd);
            axpy(ds, qt, dkb + s * ks, hd);
            axpy(p, dot_, dvb + s * ks, hd);
          }
        }
    }
}
// Causal attention over the whole sequence: one block, positions 0..T-1.
static std::vector<int32_t> positions(int64_t T) {
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t);
  return pos;
}

void attention_fwd(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, float* out, float* lse) {
  const auto pos = positions(T);
  attention_fwd_block(q, k, v, B, T, T, Hq, Hkv, hd, scale, pos.data(), pos.data(), out, lse);
}

void attention_bwd(const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, int64_t B, int64_t T, int64_t Hq,
                   int64_t Hkv, int64_t hd, float scale, float* dq, float* dk, float* dv) {
  const auto pos = positions(T);
  std::fill(dq, dq + B * T * Hq * hd, 0.f);
  std::fill(dk, dk + B * T * Hkv * hd, 0.f);
  std::fill(dv, dv + B * T * Hkv * hd, 0.f);
  attention_bwd_block(q, k, v, out, lse, dout, B, T, T, Hq, Hkv, hd, scale, pos.data(), pos.data(),
                      dq, dk, dv);
}
}  // namespace st::kernels
