// What the GPU micro-benchmarks (bench_gemm.cpp, bench_attention.cpp) share:
// device 0 opened as the backend opens it, inputs of small non-zero bf16
// values, and the mean device time of one call timed with CUDA events.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/ops_cuda.hpp"

namespace st::cuda::bench {

// Device 0 of this one process (no MPI); its name in `name`. Throws
// st::Error naming why not.
inline std::unique_ptr<CudaDevice> open_device(std::string& name) {
  int ordinal = 0;
  const std::string why = select_device(nullptr, &ordinal, &name);
  if (!why.empty()) throw Error(why);
  return std::make_unique<CudaDevice>(ordinal, name);
}

// n small non-zero bf16 values in dst, through `scratch` (n floats): exact
// zeros would flatter the tensor cores' power draw.
inline void fill_small(float* scratch, kernels::cuda::bf16* dst, int64_t n, cudaStream_t s) {
  ST_CUDA_CHECK(cudaMemsetAsync(scratch, 0x3c, size_t(n) * sizeof(float), s));
  kernels::cuda::cast_f32_bf16(scratch, dst, n, s);
}

// Mean seconds of one run() over `iters` calls on stream s, after `warmup`
// calls.
template <class F>
double seconds_per_call(Stream& s, int64_t warmup, int64_t iters, F&& run) {
  for (int64_t i = 0; i < warmup; ++i) run();
  CudaEvent t0, t1;
  t0.record(s);
  for (int64_t i = 0; i < iters; ++i) run();
  t1.record(s);
  return t1.seconds_since(t0) / double(iters);
}

}  // namespace st::cuda::bench
