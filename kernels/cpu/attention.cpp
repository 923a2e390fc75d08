// CPU causal grouped-query attention for kernels/ops.hpp, flash-style: the
// forward keeps only the output and the per-row log-sum-exp; the backward
// recomputes the probabilities from q, k and lse. OpenMP over (batch, head)
// in the forward and over (batch, kv head) in the backward, so each thread
// owns the dk/dv rows it writes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/ops.hpp"

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
}  // namespace

ST_CPU_CLONES void attention_fwd(const float* q, const float* k, const float* v, int64_t B,
                                 int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                                 float* out, float* lse) {
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const int64_t group = Hq / Hkv;
  const int64_t qs = Hq * hd, ks = Hkv * hd;  // row strides (per token)
#pragma omp parallel if (B * Hq * T * T * hd / 2 > kMinParallelWork)
  {
    std::vector<float> pbuf(static_cast<size_t>(T));
    float* p = pbuf.data();
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / group;
        const float* kb = k + b * T * ks + kh * hd;
        const float* vb = v + b * T * ks + kh * hd;
        for (int64_t t = 0; t < T; ++t) {
          const float* qt = q + (b * T + t) * qs + h * hd;
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t s = 0; s <= t; ++s) {
            p[s] = scale * dot(qt, kb + s * ks, hd);
            m = std::max(m, p[s]);
          }
          float sum = 0.f;
          for (int64_t s = 0; s <= t; ++s) {
            p[s] = std::exp(p[s] - m);
            sum += p[s];
          }
          const float inv = 1.f / sum;
          float* ot = out + (b * T + t) * qs + h * hd;
          std::fill(ot, ot + hd, 0.f);
          for (int64_t s = 0; s <= t; ++s) axpy(p[s] * inv, vb + s * ks, ot, hd);
          lse[(b * Hq + h) * T + t] = m + std::log(sum);
        }
      }
  }
}

ST_CPU_CLONES void attention_bwd(const float* q, const float* k, const float* v, const float* out,
                                 const float* lse, const float* dout, int64_t B, int64_t T,
                                 int64_t Hq, int64_t Hkv, int64_t hd, float scale, float* dq,
                                 float* dk, float* dv) {
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const int64_t group = Hq / Hkv;
  const int64_t qs = Hq * hd, ks = Hkv * hd;
#pragma omp parallel for collapse(2) schedule(static) if (B * Hq * T * T * hd > kMinParallelWork)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      const float* kb = k + b * T * ks + kh * hd;
      const float* vb = v + b * T * ks + kh * hd;
      float* dkb = dk + b * T * ks + kh * hd;
      float* dvb = dv + b * T * ks + kh * hd;
      for (int64_t s = 0; s < T; ++s) {
        std::fill(dkb + s * ks, dkb + s * ks + hd, 0.f);
        std::fill(dvb + s * ks, dvb + s * ks + hd, 0.f);
      }
      for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t row = (b * T + t) * qs + h * hd;
          const float* qt = q + row;
          const float* dot_ = dout + row;
          float* dqt = dq + row;
          std::fill(dqt, dqt + hd, 0.f);
          const float L = lse[(b * Hq + h) * T + t];
          const float D = dot(dot_, out + row, hd);  // sum_s p_s dp_s
          for (int64_t s = 0; s <= t; ++s) {
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
}  // namespace st::kernels
