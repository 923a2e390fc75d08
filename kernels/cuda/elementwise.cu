// CUDA row-wise and elementwise kernels of ops_cuda.hpp: casts, residual add,
// scale, vocab-shard embedding, RMSNorm, RoPE, SwiGLU. bf16 storage, fp32
// math, one rounding per stored value (the formulas of kernels/cpu). The
// reductions into parameter gradients have a fixed order per column: the
// embedding gradient adds rows in row order exactly as the CPU kernel does,
// the RMSNorm weight gradient sums 8 interleaved row groups in group order.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.hpp"

namespace st::kernels::cuda {
using namespace detail;

namespace {
__global__ void k_f32_to_bf16(const float* x, bf16* y, int64_t n) {
  ST_GRID_STRIDE(i, n) y[i] = to_bf(x[i]);
}
__global__ void k_bf16_to_f32(const bf16* x, float* y, int64_t n) {
  ST_GRID_STRIDE(i, n) y[i] = to_f(x[i]);
}
template <typename T>
__global__ void k_add(T* y, const T* x, int64_t n) {
  ST_GRID_STRIDE(i, n) st(y + i, ld(y + i) + ld(x + i));
}
__global__ void k_scale(float* x, int64_t n, float a) { ST_GRID_STRIDE(i, n) x[i] *= a; }
__global__ void k_iota(int32_t* p, int64_t n) { ST_GRID_STRIDE(i, n) p[i] = int32_t(i); }

// One block per row; rows whose token is outside [v0, v0 + vl) get 0.
__global__ void k_embedding_fwd(const int32_t* tokens, const bf16* table, int64_t v0, int64_t vl,
                                int64_t d, bf16* out) {
  const int64_t r = blockIdx.x;
  const int64_t t = int64_t(tokens[r]) - v0;
  const bool ok = t >= 0 && t < vl;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    out[r * d + j] = ok ? table[t * d + j] : to_bf(0.f);
}

// One thread per column walks the rows in order: no races, the CPU's order.
__global__ void k_embedding_bwd(const int32_t* tokens, int64_t rows, const bf16* dout, int64_t v0,
                                int64_t vl, int64_t d, float* dtable) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = int64_t(tokens[r]) - v0;
    if (t >= 0 && t < vl) dtable[t * d + j] += to_f(dout[r * d + j]);
  }
}

__global__ void k_rmsnorm_fwd(const bf16* x, const bf16* w, int64_t d, float eps, bf16* y,
                              float* rstd) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const bf16* xr = x + r * d;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = to_f(xr[j]);
    ss += v * v;
  }
  ss = block_sum(ss, sh);
  const float rs = 1.f / sqrtf(ss / float(d) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    y[r * d + j] = to_bf(to_f(xr[j]) * rs * to_f(w[j]));
}

__global__ void k_rmsnorm_bwd_dx(const bf16* x, const bf16* w, const float* rstd, const bf16* dy,
                                 int64_t d, bf16* dx, bool accumulate) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const bf16 *xr = x + r * d, *dyr = dy + r * d;
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    dot += to_f(dyr[j]) * to_f(w[j]) * to_f(xr[j]);
  dot = block_sum(dot, sh);
  const float rs = rstd[r];
  const float c = dot * rs * rs * rs / float(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float v = rs * to_f(w[j]) * to_f(dyr[j]) - c * to_f(xr[j]);
    if (accumulate) v += to_f(dx[r * d + j]);
    dx[r * d + j] = to_bf(v);
  }
}

// dw[j] += sum_r dy[r,j] x[r,j] rstd[r]: a block owns 32 columns, its 8 warps
// take every 8th row, and the 8 partial sums are added in warp order.
constexpr int kDwCols = 32, kDwGroups = 8;
__global__ void k_rmsnorm_bwd_dw(const bf16* x, const float* rstd, const bf16* dy, int64_t rows,
                                 int64_t d, float* dw) {
  __shared__ float part[kDwGroups][kDwCols];
  const int64_t j = blockIdx.x * int64_t(kDwCols) + threadIdx.x;
  float acc = 0.f;
  if (j < d)
    for (int64_t r = threadIdx.y; r < rows; r += kDwGroups)
      acc += to_f(dy[r * d + j]) * to_f(x[r * d + j]) * rstd[r];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < d) {
    float s = 0.f;
    for (int g = 0; g < kDwGroups; ++g) s += part[g][threadIdx.x];
    dw[j] += s;
  }
}

// Interleaved pairs (x[2i], x[2i+1]) rotated by sign * angle(t, i).
__global__ void k_rope(bf16* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
                       const float* sin_t, float sign) {
  const int64_t half = hd / 2;
  ST_GRID_STRIDE(idx, B * T * H * half) {
    const int64_t i = idx % half;
    const int64_t t = (idx / (half * H)) % T;
    bf16* p = x + (idx / half) * hd + 2 * i;
    const float c = cos_t[t * half + i], s = sign * sin_t[t * half + i];
    const float x0 = to_f(p[0]), x1 = to_f(p[1]);
    p[0] = to_bf(x0 * c - x1 * s);
    p[1] = to_bf(x0 * s + x1 * c);
  }
}

__global__ void k_swiglu_fwd(const bf16* gate, const bf16* up, int64_t n, bf16* out) {
  ST_GRID_STRIDE(i, n) {
    const float g = to_f(gate[i]);
    const float sig = 1.f / (1.f + expf(-g));
    out[i] = to_bf(g * sig * to_f(up[i]));
  }
}

// dgate/dup may alias gate/up: each element is read before it is written.
__global__ void k_swiglu_bwd(const bf16* gate, const bf16* up, const bf16* dout, int64_t n,
                             bf16* dgate, bf16* dup) {
  ST_GRID_STRIDE(i, n) {
    const float g = to_f(gate[i]), u = to_f(up[i]), dy = to_f(dout[i]);
    const float sig = 1.f / (1.f + expf(-g));
    dgate[i] = to_bf(dy * u * sig * (1.f + g * (1.f - sig)));
    dup[i] = to_bf(dy * (g * sig));
  }
}
}  // namespace

void cast_f32_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_f32_to_bf16<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  ST_CUDA_CHECK_LAUNCH();
}
void cast_bf16_f32(const bf16* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_bf16_to_f32<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  ST_CUDA_CHECK_LAUNCH();
}
void add(bf16* y, const bf16* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_add<<<grid_for(n), kThreads, 0, s>>>(y, x, n);
  ST_CUDA_CHECK_LAUNCH();
}
void add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_add<<<grid_for(n), kThreads, 0, s>>>(y, x, n);
  ST_CUDA_CHECK_LAUNCH();
}
void scale(float* x, int64_t n, float a, cudaStream_t s) {
  if (n <= 0) return;
  k_scale<<<grid_for(n), kThreads, 0, s>>>(x, n, a);
  ST_CUDA_CHECK_LAUNCH();
}
void iota(int32_t* p, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_iota<<<grid_for(n), kThreads, 0, s>>>(p, n);
  ST_CUDA_CHECK_LAUNCH();
}

void embedding_fwd(const int32_t* tokens, int64_t rows, const bf16* table, int64_t v0, int64_t vl,
                   int64_t d, bf16* out, cudaStream_t s) {
  if (rows <= 0 || d <= 0) return;
  k_embedding_fwd<<<unsigned(rows), kThreads, 0, s>>>(tokens, table, v0, vl, d, out);
  ST_CUDA_CHECK_LAUNCH();
}
void embedding_bwd(const int32_t* tokens, int64_t rows, const bf16* dout, int64_t v0, int64_t vl,
                   int64_t d, float* dtable, cudaStream_t s) {
  if (rows <= 0 || d <= 0) return;
  // Small blocks spread the d column walkers over more SMs.
  k_embedding_bwd<<<unsigned((d + 63) / 64), 64, 0, s>>>(tokens, rows, dout, v0, vl, d, dtable);
  ST_CUDA_CHECK_LAUNCH();
}

void rmsnorm_fwd(const bf16* x, const bf16* w, int64_t rows, int64_t d, float eps, bf16* y,
                 float* rstd, cudaStream_t s) {
  if (rows <= 0) return;
  k_rmsnorm_fwd<<<unsigned(rows), kThreads, 0, s>>>(x, w, d, eps, y, rstd);
  ST_CUDA_CHECK_LAUNCH();
}
void rmsnorm_bwd(const bf16* x, const bf16* w, const float* rstd, const bf16* dy, int64_t rows,
                 int64_t d, bf16* dx, float* dw, bool accumulate, cudaStream_t s) {
  if (rows <= 0) return;
  k_rmsnorm_bwd_dx<<<unsigned(rows), kThreads, 0, s>>>(x, w, rstd, dy, d, dx, accumulate);
  ST_CUDA_CHECK_LAUNCH();
  k_rmsnorm_bwd_dw<<<unsigned((d + kDwCols - 1) / kDwCols), dim3(kDwCols, kDwGroups), 0, s>>>(
      x, rstd, dy, rows, d, dw);
  ST_CUDA_CHECK_LAUNCH();
}

void rope(bf16* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
          const float* sin_t, bool inverse, cudaStream_t s) {
  ST_CHECK(hd % 2 == 0, "RoPE needs an even head dimension, got ", hd);
  const int64_t n = B * T * H * (hd / 2);
  if (n <= 0) return;
  k_rope<<<grid_for(n), kThreads, 0, s>>>(x, B, T, H, hd, cos_t, sin_t, inverse ? -1.f : 1.f);
  ST_CUDA_CHECK_LAUNCH();
}

void swiglu_fwd(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t s) {
  if (n <= 0) return;
  k_swiglu_fwd<<<grid_for(n), kThreads, 0, s>>>(gate, up, n, out);
  ST_CUDA_CHECK_LAUNCH();
}
void swiglu_bwd(const bf16* gate, const bf16* up, const bf16* dout, int64_t n, bf16* dgate,
                bf16* dup, cudaStream_t s) {
  if (n <= 0) return;
  k_swiglu_bwd<<<grid_for(n), kThreads, 0, s>>>(gate, up, dout, n, dgate, dup);
  ST_CUDA_CHECK_LAUNCH();
}
}  // namespace st::kernels::cuda
