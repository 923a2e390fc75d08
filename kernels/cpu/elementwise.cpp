// CPU row-wise and elementwise ops for kernels/ops.hpp: residual add,
// embedding, RMSNorm, RoPE, SwiGLU, AdamW (the one optimizer formula of
// kernels/ops.hpp, which training on CPU ranks runs). OpenMP over rows /
// elements, SIMD within them, compiled for AVX-512, AVX2 and baseline x86-64
// (simd.hpp); reductions into parameter gradients are split by columns so
// their result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"

namespace st::kernels {
namespace {
// Column block for row reductions into parameter gradients.
constexpr int64_t kColBlock = 64;
}  // namespace

ST_CPU_CLONES void widen_bf16(const uint16_t* x, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n > 4 * kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(x[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    y[i] = f;
  }
}

ST_CPU_CLONES void narrow_bf16(const float* x, int64_t n, uint16_t* y) {
#pragma omp parallel for simd schedule(static) if (n > 4 * kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    y[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x0040u : rounded);
  }
}

ST_CPU_CLONES void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void embedding_fwd(const int32_t* tokens, int64_t rows, const float* table, int64_t vocab,
                   int64_t d, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    ST_CHECK(tokens[r] >= 0 && tokens[r] < vocab, "token ", tokens[r], " at position ", r,
             " is outside the vocabulary [0, ", vocab, ")");
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = table + int64_t(tokens[r]) * d;
    float* dst = out + r * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
  }
}

void embedding_bwd(const int32_t* tokens, int64_t rows, const float* dout, int64_t vocab, int64_t d,
                   float* dtable) {
  // Each thread owns a column block and walks the rows in order: no races,
  // and the summation order is fixed.
  const int64_t nblk = (d + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t b = 0; b < nblk; ++b) {
    const int64_t j0 = b * kColBlock, j1 = std::min(d, j0 + kColBlock);
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = dtable + int64_t(tokens[r]) * d;
      const float* src = dout + r * d;
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  }
}

void embedding_fwd_shard(const int32_t* tokens, int64_t rows, const float* table, int64_t v0,
                         int64_t vl, int64_t d, float* out) {
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = int64_t(tokens[r]) - v0;
    float* dst = out + r * d;
    if (t < 0 || t >= vl) {
      std::fill(dst, dst + d, 0.f);
      continue;
    }
    const float* src = table + t * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
  }
}

void embedding_bwd_shard(const int32_t* tokens, int64_t rows, const float* dout, int64_t v0,
                         int64_t vl, int64_t d, float* dtable) {
  const int64_t nblk = (d + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t b = 0; b < nblk; ++b) {
    const int64_t j0 = b * kColBlock, j1 = std::min(d, j0 + kColBlock);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = int64_t(tokens[r]) - v0;
      if (t < 0 || t >= vl) continue;
      float* dst = dtable + t * d;
      const float* src = dout + r * d;
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  }
}

ST_CPU_CLONES void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t d, float eps,
                               float* y, float* rstd) {
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
    const float rs = 1.f / std::sqrt(ss / float(d) + eps);
    rstd[r] = rs;
    float* yr = y + r * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * rs * w[j];
  }
}

ST_CPU_CLONES void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                               int64_t rows, int64_t d, float* dx, float* dw, bool accumulate) {
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float rs = rstd[r];
    float dot = 0.f;  // sum_j dy_j w_j x_j
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < d; ++j) dot += dyr[j] * w[j] * xr[j];
    const float c = dot * rs * rs * rs / float(d);
    float* dxr = dx + r * d;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dxr[j] += rs * w[j] * dyr[j] - c * xr[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dxr[j] = rs * w[j] * dyr[j] - c * xr[j];
    }
  }
  const int64_t nblk = (d + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t b = 0; b < nblk; ++b) {
    const int64_t j0 = b * kColBlock, j1 = std::min(d, j0 + kColBlock);
    float acc[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * d;
      const float* dyr = dy + r * d;
      const float rs = rstd[r];
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += dyr[j] * xr[j] * rs;
    }
    for (int64_t j = j0; j < j1; ++j) dw[j] += acc[j - j0];
  }
}

void rope_table(int64_t T, int64_t hd, double theta, int64_t pos0, float* cos_t, float* sin_t) {
  ST_CHECK(hd % 2 == 0, "RoPE needs an even head dimension, got ", hd);
  const int64_t half = hd / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -double(2 * i) / double(hd));
      const double a = double(pos0 + t) * freq;
      cos_t[t * half + i] = float(std::cos(a));
      sin_t[t * half + i] = float(std::sin(a));
    }
}

namespace {
ST_CPU_CLONES void rope_apply(float* x, int64_t B, int64_t T, int64_t H, int64_t hd,
                              const float* cos_t, const float* sin_t, float sign) {
  const int64_t half = hd / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * T * H * hd > kMinParallelWork)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* c = cos_t + t * half;
      const float* s = sin_t + t * half;
      for (int64_t h = 0; h < H; ++h) {
        float* p = x + ((b * T + t) * H + h) * hd;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = p[2 * i], x1 = p[2 * i + 1];
          const float si = sign * s[i];
          p[2 * i] = x0 * c[i] - x1 * si;
          p[2 * i + 1] = x0 * si + x1 * c[i];
        }
      }
    }
}
}  // namespace

void rope_fwd(float* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t) {
  rope_apply(x, B, T, H, hd, cos_t, sin_t, 1.f);
}

void rope_bwd(float* dx, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t) {
  rope_apply(dx, B, T, H, hd, cos_t, sin_t, -1.f);
}

ST_CPU_CLONES void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp parallel for simd schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float sig = 1.f / (1.f + exp_fast(-g));
    out[i] = g * sig * up[i];
  }
}

ST_CPU_CLONES void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n,
                              float* dgate, float* dup) {
#pragma omp parallel for simd schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], dy = dout[i];
    const float sig = 1.f / (1.f + exp_fast(-g));
    const float silu = g * sig;
    dgate[i] = dy * u * sig * (1.f + g * (1.f - sig));
    dup[i] = dy * silu;
  }
}

ST_CPU_CLONES void adamw_step(float* w, const float* g, float* m, float* v, int64_t n, float lr,
                              float beta1, float beta2, float eps, float weight_decay, int64_t step,
                              float grad_scale) {
  ST_CHECK(step >= 1, "adamw step counts from 1, got ", step);
  const float bc1 = 1.f - float(std::pow(double(beta1), double(step)));
  const float bc2 = 1.f - float(std::pow(double(beta2), double(step)));
#pragma omp parallel for simd schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] - lr * (weight_decay * w[i] + (mi / bc1) / (std::sqrt(vi / bc2) + eps));
  }
}
}  // namespace st::kernels
