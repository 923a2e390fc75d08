// scaletrain-bench-gemm: the bf16 GEMM rate this GPU reaches through the
// backend's cuBLASLt wrapper (bf16 in, fp32 accumulate, bf16 out), the
// denominator-independent figure that gpu-check.sh prints beside MFU.
// Usage: scaletrain-bench-gemm [M N K] [iterations]; default 8192^3, 50.
// Prints "bf16_gemm_tflops=<x>" last. Exit 77 when no GPU is visible.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/bench_util.hpp"
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
  if (M < 1 || N < 1 || K < 1 || iters < 1) {
    std::fprintf(stderr, "usage: scaletrain-bench-gemm [M N K] [iterations], all >= 1\n");
    return 2;
  }
  try {
    namespace kc = st::kernels::cuda;
    namespace bench = st::cuda::bench;
    std::string name;
    const auto dev = bench::open_device(name);
    st::Stream& s = dev->compute_stream();
    const cudaStream_t cs = st::cuda::native(s);
    auto buf = [&](size_t bytes) { return dev->allocate(bytes, st::MemCat::Other); };
    auto* a = static_cast<kc::bf16*>(buf(size_t(M * K) * 2));
    auto* b = static_cast<kc::bf16*>(buf(size_t(K * N) * 2));
    auto* c = static_cast<kc::bf16*>(buf(size_t(M * N) * 2));
    auto* f = static_cast<float*>(buf(size_t(std::max(M * K, K * N)) * 4));
    bench::fill_small(f, a, M * K, cs);
    bench::fill_small(f, b, K * N, cs);
    {
      kc::GemmLt gemm(*dev);
      const double sec = bench::seconds_per_call(
          s, 5, iters, [&] { gemm.gemm(false, false, M, N, K, 1.f, a, K, b, N, 0.f, c, N, cs); });
      const double tflops = 2.0 * double(M) * double(N) * double(K) / sec * 1e-12;
      std::printf(
          "device: %s\ncuBLASLt bf16 GEMM %lldx%lldx%lld: %.3f ms/iter over %lld iterations\n",
          name.c_str(), (long long)M, (long long)N, (long long)K, sec * 1e3, (long long)iters);
      std::printf("bf16_gemm_tflops=%.1f\n", tflops);
    }
    dev->synchronize();
    for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c),
                    static_cast<void*>(f)})
      dev->deallocate(p, 0, st::MemCat::Other);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
