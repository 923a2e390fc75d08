// Device helpers shared by the CUDA kernels: launch geometry, loads and
// stores that widen bf16 to fp32 and round once on store (the rounding
// points of kernels/ops.hpp), and warp/block reductions with a fixed order
// (so results are deterministic for a given block size). expf/logf are the
// accurate ones, not the __expf intrinsics, to stay close to the CPU twins.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/host/launch_limits.hpp"

namespace st::kernels::cuda::detail {

constexpr int kThreads = 256;

// Grid-stride loops cover what the capped grid does not (launch_limits.hpp).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  return cuda_host::elementwise_grid(n, threads);
}

#define ST_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ __nv_bfloat16 to_bf(float x) { return __float2bfloat16(x); }

// Typed load (widened to fp32) and store (rounded once).
__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `sh` holds >= 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  float t = lane < nw ? sh[lane] : 0.f;
  return warp_sum(t);
}

// Sum of doubles over the block (power-of-two blockDim <= 1024, `sh` holds
// blockDim.x doubles): a fixed tree, the result in thread 0.
__device__ __forceinline__ double block_sum_tree(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

// Online softmax state (max, sum of exp(x - max)) and its merge.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum ms_merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum block_maxsum(MaxSum v, MaxSum* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum u{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = ms_merge(v, u);
  }
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  v = lane < nw ? sh[lane] : MaxSum{-INFINITY, 0.f};
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum u{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = ms_merge(v, u);
  }
  return v;
}
}  // namespace st::kernels::cuda::detail
