// CPU row-wise and elementwise ops for kernels/ops.hpp: residual add,
// embedding, RMSNorm, RoPE, SwiGLU, AdamW (the one optimizer formula of
// kernels/ops.hpp, which training on CPU ranks runs). OpenMP over rows /
// elements, SIMD within them, compiled for AVX-512, AVX2 and baseline x86-64
// (simd.hpp); reductions into parameter gradients are split by columns so
// their result does not depend on the thread count. The activation kernels
// are written once as templates over the storage type (fp32, or bf16 bits)
// and read and write bf16 directly, converting in registers (simd.hpp's
// to_f32 / from_f32: fp32 math, one rounding per stored bf16 output); the
// entry points are the fp32 and bf16 overloads of cpu_kernels.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"
#include "kernels/stochastic_round.hpp"
#include "tensor/dtype.hpp"

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

namespace {
template <typename T>
ST_CPU_CLONES void add_inplace_t(T* y, const T* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(to_f32(y[i]) + to_f32(x[i]));
}
}  // namespace
void add_inplace(float* y, const float* x, int64_t n) { add_inplace_t(y, x, n); }
void add_inplace(uint16_t* y, const uint16_t* x, int64_t n) { add_inplace_t(y, x, n); }

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

namespace {
template <typename T>
void embedding_fwd_shard_t(const int32_t* tokens, int64_t rows, const T* table, int64_t v0,
                           int64_t vl, int64_t d, T* out) {
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = int64_t(tokens[r]) - v0;
    T* dst = out + r * d;
    if (t < 0 || t >= vl) {
      std::fill(dst, dst + d, T(0));
      continue;
    }
    const T* src = table + t * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
  }
}

template <typename T>
void embedding_bwd_shard_t(const int32_t* tokens, int64_t rows, const T* dout, int64_t v0,
                           int64_t vl, int64_t d, float* dtable) {
  const int64_t nblk = (d + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t b = 0; b < nblk; ++b) {
    const int64_t j0 = b * kColBlock, j1 = std::min(d, j0 + kColBlock);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = int64_t(tokens[r]) - v0;
      if (t < 0 || t >= vl) continue;
      float* dst = dtable + t * d;
      const T* src = dout + r * d;
      for (int64_t j = j0; j < j1; ++j) dst[j] += to_f32(src[j]);
    }
  }
}
}  // namespace

void embedding_fwd_shard(const int32_t* tokens, int64_t rows, const float* table, int64_t v0,
                         int64_t vl, int64_t d, float* out) {
  embedding_fwd_shard_t(tokens, rows, table, v0, vl, d, out);
}
void embedding_fwd_shard(const int32_t* tokens, int64_t rows, const uint16_t* table, int64_t v0,
                         int64_t vl, int64_t d, uint16_t* out) {
  embedding_fwd_shard_t(tokens, rows, table, v0, vl, d, out);
}
void embedding_bwd_shard(const int32_t* tokens, int64_t rows, const float* dout, int64_t v0,
                         int64_t vl, int64_t d, float* dtable) {
  embedding_bwd_shard_t(tokens, rows, dout, v0, vl, d, dtable);
}
void embedding_bwd_shard(const int32_t* tokens, int64_t rows, const uint16_t* dout, int64_t v0,
                         int64_t vl, int64_t d, float* dtable) {
  embedding_bwd_shard_t(tokens, rows, dout, v0, vl, d, dtable);
}

namespace {
template <typename T>
ST_CPU_CLONES void rmsnorm_fwd_t(const T* x, const T* w, int64_t rows, int64_t d, float eps, T* y,
                                 float* rstd) {
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; ++j) ss += to_f32(xr[j]) * to_f32(xr[j]);
    const float rs = 1.f / std::sqrt(ss / float(d) + eps);
    rstd[r] = rs;
    T* yr = y + r * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) yr[j] = from_f32<T>(to_f32(xr[j]) * rs * to_f32(w[j]));
  }
}

template <typename T>
ST_CPU_CLONES void rmsnorm_bwd_t(const T* x, const T* w, const float* rstd, const T* dy,
                                 int64_t rows, int64_t d, T* dx, float* dw, bool accumulate) {
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const float rs = rstd[r];
    float dot = 0.f;  // sum_j dy_j w_j x_j
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < d; ++j) dot += to_f32(dyr[j]) * to_f32(w[j]) * to_f32(xr[j]);
    const float c = dot * rs * rs * rs / float(d);
    T* dxr = dx + r * d;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j)
        dxr[j] =
            from_f32<T>(to_f32(dxr[j]) + (rs * to_f32(w[j]) * to_f32(dyr[j]) - c * to_f32(xr[j])));
    } else {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j)
        dxr[j] = from_f32<T>(rs * to_f32(w[j]) * to_f32(dyr[j]) - c * to_f32(xr[j]));
    }
  }
  const int64_t nblk = (d + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * d > kMinParallelWork)
  for (int64_t b = 0; b < nblk; ++b) {
    const int64_t j0 = b * kColBlock, j1 = std::min(d, j0 + kColBlock);
    float acc[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * d;
      const T* dyr = dy + r * d;
      const float rs = rstd[r];
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += to_f32(dyr[j]) * to_f32(xr[j]) * rs;
    }
    for (int64_t j = j0; j < j1; ++j) dw[j] += acc[j - j0];
  }
}
}  // namespace

void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                 float* rstd) {
  rmsnorm_fwd_t(x, w, rows, d, eps, y, rstd);
}
void rmsnorm_fwd(const uint16_t* x, const uint16_t* w, int64_t rows, int64_t d, float eps,
                 uint16_t* y, float* rstd) {
  rmsnorm_fwd_t(x, w, rows, d, eps, y, rstd);
}
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                 int64_t d, float* dx, float* dw, bool accumulate) {
  rmsnorm_bwd_t(x, w, rstd, dy, rows, d, dx, dw, accumulate);
}
void rmsnorm_bwd(const uint16_t* x, const uint16_t* w, const float* rstd, const uint16_t* dy,
                 int64_t rows, int64_t d, uint16_t* dx, float* dw, bool accumulate) {
  rmsnorm_bwd_t(x, w, rstd, dy, rows, d, dx, dw, accumulate);
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
template <typename T>
ST_CPU_CLONES void rope_apply_t(T* x, int64_t B, int64_t T_, int64_t H, int64_t hd,
                                const float* cos_t, const float* sin_t, float sign) {
  const int64_t half = hd / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * T_ * H * hd > kMinParallelWork)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const float* c = cos_t + t * half;
      const float* s = sin_t + t * half;
      for (int64_t h = 0; h < H; ++h) {
        T* p = x + ((b * T_ + t) * H + h) * hd;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = to_f32(p[2 * i]), x1 = to_f32(p[2 * i + 1]);
          const float si = sign * s[i];
          p[2 * i] = from_f32<T>(x0 * c[i] - x1 * si);
          p[2 * i + 1] = from_f32<T>(x0 * si + x1 * c[i]);
        }
      }
    }
}
void rope_apply(float* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
                const float* sin_t, float sign) {
  rope_apply_t(x, B, T, H, hd, cos_t, sin_t, sign);
}
void rope_apply(uint16_t* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
                const float* sin_t, float sign) {
  rope_apply_t(x, B, T, H, hd, cos_t, sin_t, sign);
}

inline void swiglu_fwd_f32(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float sig = 1.f / (1.f + exp_fast(-g));
    out[i] = g * sig * up[i];
  }
}

inline void swiglu_bwd_f32(const float* gate, const float* up, const float* dout, int64_t n,
                           float* dgate, float* dup) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], dy = dout[i];
    const float sig = 1.f / (1.f + exp_fast(-g));
    const float silu = g * sig;
    dgate[i] = dy * u * sig * (1.f + g * (1.f - sig));
    dup[i] = dy * silu;
  }
}

// The elements in chunks (elementwise, so any split gives the same bits);
// bf16 chunks go through fp32 stack buffers (simd.hpp).
ST_CPU_CLONES void swiglu_fwd_t(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t i0 = c * kChunk;
    swiglu_fwd_f32(gate + i0, up + i0, std::min(kChunk, n - i0), out + i0);
  }
}
ST_CPU_CLONES void swiglu_fwd_t(const uint16_t* gate, const uint16_t* up, int64_t n,
                                uint16_t* out) {
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t i0 = c * kChunk, m = std::min(kChunk, n - i0);
    float g[kChunk], u[kChunk], o[kChunk];
    widen_chunk(gate + i0, m, g);
    widen_chunk(up + i0, m, u);
    swiglu_fwd_f32(g, u, m, o);
    narrow_chunk(o, m, out + i0);
  }
}

ST_CPU_CLONES void swiglu_bwd_t(const float* gate, const float* up, const float* dout, int64_t n,
                                float* dgate, float* dup) {
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t i0 = c * kChunk;
    swiglu_bwd_f32(gate + i0, up + i0, dout + i0, std::min(kChunk, n - i0), dgate + i0, dup + i0);
  }
}
ST_CPU_CLONES void swiglu_bwd_t(const uint16_t* gate, const uint16_t* up, const uint16_t* dout,
                                int64_t n, uint16_t* dgate, uint16_t* dup) {
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (8 * n > kMinParallelWork)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t i0 = c * kChunk, m = std::min(kChunk, n - i0);
    float g[kChunk], u[kChunk], dy[kChunk];
    widen_chunk(gate + i0, m, g);
    widen_chunk(up + i0, m, u);
    widen_chunk(dout + i0, m, dy);
    // In place over the chunk buffers (dgate may alias gate, dup up).
    swiglu_bwd_f32(g, u, dy, m, g, u);
    narrow_chunk(g, m, dgate + i0);
    narrow_chunk(u, m, dup + i0);
  }
}
}  // namespace

void rope_fwd(float* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t) {
  rope_apply(x, B, T, H, hd, cos_t, sin_t, 1.f);
}
void rope_fwd(uint16_t* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t) {
  rope_apply(x, B, T, H, hd, cos_t, sin_t, 1.f);
}
void rope_bwd(float* dx, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t) {
  rope_apply(dx, B, T, H, hd, cos_t, sin_t, -1.f);
}
void rope_bwd(uint16_t* dx, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
              const float* sin_t) {
  rope_apply(dx, B, T, H, hd, cos_t, sin_t, -1.f);
}

void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out) {
  swiglu_fwd_t(gate, up, n, out);
}
void swiglu_fwd(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out) {
  swiglu_fwd_t(gate, up, n, out);
}
void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                float* dup) {
  swiglu_bwd_t(gate, up, dout, n, dgate, dup);
}
void swiglu_bwd(const uint16_t* gate, const uint16_t* up, const uint16_t* dout, int64_t n,
                uint16_t* dgate, uint16_t* dup) {
  swiglu_bwd_t(gate, up, dout, n, dgate, dup);
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

ST_CPU_CLONES void adamw_step_bf16(uint16_t* w, const float* g, uint16_t* m, uint16_t* v, int64_t n,
                                   float lr, float beta1, float beta2, float eps,
                                   float weight_decay, int64_t step, float grad_scale,
                                   uint32_t seed, uint32_t key, int64_t pos0) {
  ST_CHECK(step >= 1, "adamw step counts from 1, got ", step);
  const float bc1 = 1.f - float(std::pow(double(beta1), double(step)));
  const float bc2 = 1.f - float(std::pow(double(beta2), double(step)));
  const uint32_t s = sround::stream(seed, key);
#pragma omp parallel for schedule(static) if (16 * n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = sround::bits(s, uint64_t(pos0 + i)), r2 = sround::bits2(r);
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * bf16_to_f32(m[i]) + (1.f - beta1) * gi;
    const float vi = beta2 * bf16_to_f32(v[i]) + (1.f - beta2) * gi * gi;
    const float wi = bf16_to_f32(w[i]);
    m[i] = sround::to_bf16(mi, r);
    v[i] = sround::to_bf16(vi, r >> 16);
    w[i] = sround::to_bf16(wi - lr * (weight_decay * wi + (mi / bc1) / (std::sqrt(vi / bc2) + eps)),
                           r2);
  }
}
}  // namespace st::kernels
