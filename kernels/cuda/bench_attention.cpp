// scaletrain-bench-attention: the causal attention rate this GPU reaches
// through the backend's cuDNN fused SDPA (bf16, the op the trainer runs),
// forward and backward, for scaletrain-plan calibrate-gpu's `rates.attention`.
// Usage: scaletrain-bench-attention T head_dim heads tokens [iterations]:
// batch = tokens / T sequences of T, `heads` query and KV heads. FLOPs are
// counted as lib/plan/ops.cpp counts them (the causal half: forward
// 4 B H hd T^2 / 2, backward 2.5 times that). Prints
// "attn_fwd_tflops=<x>" and "attn_bwd_tflops=<y>" last. Exit 77 when no GPU
// is visible, 2 on a usage error.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/bench_util.hpp"
#include "kernels/cuda/sdpa_cudnn.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (st::cuda::device_count(&why) == 0) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  const int64_t T = argc >= 5 ? std::atoll(argv[1]) : 0, hd = argc >= 5 ? std::atoll(argv[2]) : 0,
                H = argc >= 5 ? std::atoll(argv[3]) : 0,
                tokens = argc >= 5 ? std::atoll(argv[4]) : 0,
                iters = argc >= 6 ? std::atoll(argv[5]) : 20;
  if (T < 1 || hd < 1 || H < 1 || tokens < T || tokens % T != 0 || iters < 1) {
    std::fprintf(stderr,
                 "usage: scaletrain-bench-attention T head_dim heads tokens [iterations]; "
                 "tokens a multiple of T, all >= 1\n");
    return 2;
  }
  try {
    namespace kc = st::kernels::cuda;
    namespace bench = st::cuda::bench;
    std::string name;
    const auto dev = bench::open_device(name);
    st::Stream& s = dev->compute_stream();
    const cudaStream_t cs = st::cuda::native(s);
    const int64_t B = tokens / T, n = B * T * H * hd;
    std::vector<void*> bufs;
    auto buf = [&](size_t bytes) {
      return bufs.emplace_back(dev->allocate(bytes, st::MemCat::Other));
    };
    auto bf = [&] { return static_cast<kc::bf16*>(buf(size_t(n) * 2)); };
    kc::bf16 *q = bf(), *k = bf(), *v = bf(), *o = bf(), *dout = bf(), *dq = bf(), *dk = bf(),
             *dv = bf();
    auto* lse = static_cast<float*>(buf(size_t(B * H * T) * 4));
    auto* f = static_cast<float*>(buf(size_t(n) * 4));
    for (kc::bf16* p : {q, k, v, dout}) bench::fill_small(f, p, n, cs);
    const float scale = 1.f / std::sqrt(float(hd));
    const double fwd_flops = 4.0 * double(B) * double(H) * double(hd) * double(T) * double(T) / 2;
    double fwd = 0, bwd = 0;
    {
      kc::CudnnSdpa sdpa(*dev, /*deterministic_bwd=*/false);  // the default, fast backward
      fwd = bench::seconds_per_call(s, 3, iters,
                                    [&] { sdpa.fwd(q, k, v, B, T, H, H, hd, scale, o, lse, cs); });
      bwd = bench::seconds_per_call(s, 3, iters, [&] {
        sdpa.bwd(q, k, v, o, lse, dout, B, T, H, H, hd, scale, dq, dk, dv, cs);
      });
    }
    std::printf(
        "device: %s\n%s, causal, B %lld T %lld heads %lld head_dim %lld: fwd %.3f ms, "
        "bwd %.3f ms over %lld iterations\n",
        name.c_str(), kc::CudnnSdpa::description(), (long long)B, (long long)T, (long long)H,
        (long long)hd, fwd * 1e3, bwd * 1e3, (long long)iters);
    std::printf("attn_fwd_tflops=%.1f\nattn_bwd_tflops=%.1f\n", fwd_flops / fwd * 1e-12,
                2.5 * fwd_flops / bwd * 1e-12);
    dev->synchronize();
    for (void* p : bufs) dev->deallocate(p, 0, st::MemCat::Other);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
