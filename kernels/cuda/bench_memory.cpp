// scaletrain-bench-memory: what the planner's pricing: rates needs of this
// GPU besides GEMM and attention (scaletrain-plan calibrate-gpu writes it to
// rates.memory and rates.launch_us). The bandwidth the backend's own
// elementwise kernel reaches (Ops::add, y += x in bf16: 3 x 2 bytes an
// element, as lib/plan/ops.cpp counts an Add) at sizes from 384 KiB to
// 1.5 GiB moved, and the per-launch overhead: the mean device time of one
// call in a run of back-to-back adds of one element, where the kernel's own
// work is nil and what is left is launch and dispatch.
// Usage: scaletrain-bench-memory [iterations]. Prints one
// "mem_bytes=<B> mem_gbps=<x>" line per size, then "launch_us=<x>". Exit
// 77 when no GPU is visible, 2 on a usage error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/bench_util.hpp"
#include "kernels/cuda/cuda_ops.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (st::cuda::device_count(&why) == 0) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  const int64_t iters = argc >= 2 ? std::atoll(argv[1]) : 20;
  if (argc > 2 || iters < 1) {
    std::fprintf(stderr, "usage: scaletrain-bench-memory [iterations >= 1]\n");
    return 2;
  }
  try {
    namespace kc = st::kernels::cuda;
    namespace bench = st::cuda::bench;
    std::string name;
    const auto dev = bench::open_device(name);
    const auto ops = st::cuda::make_cuda_ops(*dev);
    st::Stream& s = dev->compute_stream();
    const cudaStream_t cs = st::cuda::native(s);
    const int64_t max_n = int64_t(1) << 28;  // bf16 elements: 512 MiB a buffer
    std::vector<void*> bufs;
    auto buf = [&](size_t bytes) {
      return bufs.emplace_back(dev->allocate(bytes, st::MemCat::Other));
    };
    auto* x = static_cast<kc::bf16*>(buf(size_t(max_n) * 2));
    auto* y = static_cast<kc::bf16*>(buf(size_t(max_n) * 2));
    auto* f = static_cast<float*>(buf(size_t(1) << 24));  // scratch for fill_small, 4M floats
    for (int64_t at = 0; at < max_n; at += int64_t(1) << 22)
      for (kc::bf16* p : {x, y}) bench::fill_small(f, p + at, int64_t(1) << 22, cs);
    std::printf("device: %s\n", name.c_str());
    for (int64_t n = int64_t(1) << 16; n <= max_n; n *= 4) {
      const double t =
          bench::seconds_per_call(s, 3, iters, [&] { ops->add(s, y, x, n, st::DType::BF16); });
      const double bytes = 3.0 * double(n) * 2;
      std::printf("add of %lld bf16 elements: %.3f us\nmem_bytes=%.0f mem_gbps=%.1f\n",
                  (long long)n, t * 1e6, bytes, bytes / t * 1e-9);
    }
    const int64_t launches = 1000;
    const double t =
        bench::seconds_per_call(s, 100, launches, [&] { ops->add(s, y, x, 1, st::DType::BF16); });
    std::printf("%lld back-to-back adds of one element: %.3f us each\nlaunch_us=%.3f\n",
                (long long)launches, t * 1e6, t * 1e6);
    dev->synchronize();
    for (void* p : bufs) dev->deallocate(p, 0, st::MemCat::Other);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
