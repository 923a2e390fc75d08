// scaletrain-bench-gemm: the bf16 GEMM rate this GPU reaches through the
// backend's cuBLASLt wrapper (bf16 in, fp32 accumulate, bf16 out), the
// denominator-independent figure that gpu-check.sh prints beside MFU.
// Usage: scaletrain-bench-gemm [M N K] [iterations]; default 8192^3, 50.
// Prints "bf16_gemm_tflops=<x>" last. Exit 77 when no GPU is visible.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/ops_cuda.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (st::cuda::device_count(&why) == 0) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  int64_t M = 8192, N = 8192, K = 8192, iters = 50;
  if (argc >= 4) M = std::atoll(argv[1]), N = std::atoll(argv[2]), K = std::atoll(argv[3]);
  if (argc >= 5) iters = std::atoll(argv[4]);
  try {
    using st::kernels::cuda::bf16;
    st::cuda::Stream s;
    st::cuda::DeviceBuffer a(size_t(M * K) * 2, st::MemCat::Other),
        b(size_t(K * N) * 2, st::MemCat::Other), c(size_t(M * N) * 2, st::MemCat::Other),
        f(size_t(std::max(M * K, K * N)) * 4, st::MemCat::Other);
    // Small non-zero values (exact zeros would flatter the tensor cores' power draw).
    ST_CUDA_CHECK(cudaMemsetAsync(f.data(), 0x3c, f.bytes(), s.get()));
    st::kernels::cuda::cast_f32_to_bf16(f.as<float>(), a.as<bf16>(), M * K, s.get());
    st::kernels::cuda::cast_f32_to_bf16(f.as<float>(), b.as<bf16>(), K * N, s.get());
    st::kernels::cuda::GemmLt gemm;
    auto run = [&] {
      gemm.gemm(false, false, M, N, K, 1.f, a.as<bf16>(), K, b.as<bf16>(), N, 0.f, c.as<bf16>(), N,
                s.get());
    };
    for (int i = 0; i < 5; ++i) run();
    st::cuda::EventTimer t;
    t.start(s.get());
    for (int64_t i = 0; i < iters; ++i) run();
    t.stop(s.get());
    const double sec = t.seconds() / double(iters);
    const double tflops = 2.0 * double(M) * double(N) * double(K) / sec * 1e-12;
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf(
        "device: %s\ncuBLASLt bf16 GEMM %lldx%lldx%lld: %.3f ms/iter over %lld iterations\n",
        prop.name, (long long)M, (long long)N, (long long)K, sec * 1e3, (long long)iters);
    std::printf("bf16_gemm_tflops=%.1f\n", tflops);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
