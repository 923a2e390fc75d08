// Helpers of the GPU tests: seeded random data, bf16 rounding on the host,
// device upload/download, NaN poisoning of outputs before each run, and the
// comparison every kernel test uses (NaN never passes).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"

namespace st::test {
using bf16 = __nv_bfloat16;

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
// Values exactly representable in bf16, so CPU and GPU see the same inputs.
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (auto& x : v) x = __bfloat162float(__float2bfloat16(x));
  return v;
}
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16(v[i]);
  return o;
}
inline std::vector<float> from_bf16(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __bfloat162float(v[i]);
  return o;
}

// Device copy of a host vector (caching allocator).
template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& h) {
  cuda::DeviceBuffer b(h.size() * sizeof(T) + 16, MemCat::Other);
  ST_CUDA_CHECK(cudaMemcpy(b.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}
// Output buffer filled with NaN (0xFF bytes are NaN in fp32 and bf16).
inline cuda::DeviceBuffer poisoned(size_t bytes) {
  cuda::DeviceBuffer b(bytes + 16, MemCat::Other);
  ST_CUDA_CHECK(cudaMemset(b.data(), 0xFF, bytes + 16));
  return b;
}
template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& b, size_t n) {
  ST_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  ST_CUDA_CHECK(cudaMemcpy(h.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
inline std::vector<float> download_bf16(const cuda::DeviceBuffer& b, size_t n) {
  return from_bf16(download<bf16>(b, n));
}

// Elementwise |got - ref| <= rtol * (|ref| + rms(ref)): relative where values
// are large, scaled by the tensor's typical size where they cancel to ~0.
// Any non-finite value in `got` fails.
inline ::testing::AssertionResult close(const std::vector<float>& got,
                                        const std::vector<float>& ref, double rtol,
                                        const char* what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  double ss = 0;
  for (float r : ref) ss += double(r) * r;
  const double rms = ref.empty() ? 0 : std::sqrt(ss / double(ref.size()));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    const double lim = rtol * (std::fabs(r) + rms);
    const double err = std::fabs(g - r);
    if (!std::isfinite(g) || err > lim) {
      if (bad++ == 0) first = i;
    }
    if (std::isfinite(g) && lim > 0) worst = std::max(worst, err / lim);
  }
  if (bad)
    return ::testing::AssertionFailure()
           << what << ": " << bad << " of " << got.size() << " elements outside rtol " << rtol
           << " (first at " << first << ": got " << got[first] << ", want " << ref[first]
           << ", rms " << rms << ")";
  return ::testing::AssertionSuccess() << what << ": worst error " << worst << " of tolerance";
}
}  // namespace st::test
