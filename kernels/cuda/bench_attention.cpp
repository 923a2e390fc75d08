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

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/ops_cuda.hpp"
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
    int ordinal = 0;
    std::string name;
    why = st::cuda::select_device(MPI_COMM_NULL, &ordinal, &name);  // one process, no MPI
    if (!why.empty()) throw st::Error(why);
    st::cuda::CudaDevice dev(ordinal, name);
    st::Stream& s = dev.compute_stream();
    const cudaStream_t cs = st::cuda::native(s);
    const int64_t B = tokens / T, n = B * T * H * hd;
    auto bf = [&] {
      return static_cast<kc::bf16*>(dev.allocate(size_t(n) * 2, st::MemCat::Other));
    };
    kc::bf16 *q = bf(), *k = bf(), *v = bf(), *o = bf(), *dout = bf(), *dq = bf(), *dk = bf(),
             *dv = bf();
    auto* lse = static_cast<float*>(dev.allocate(size_t(B * H * T) * 4, st::MemCat::Other));
    auto* f = static_cast<float*>(dev.allocate(size_t(n) * 4, st::MemCat::Other));
    // Small non-zero values (exact zeros would flatter the tensor cores' power draw).
    ST_CUDA_CHECK(cudaMemsetAsync(f, 0x3c, size_t(n) * 4, cs));
    for (kc::bf16* p : {q, k, v, dout}) kc::cast_f32_bf16(f, p, n, cs);
    const float scale = 1.f / std::sqrt(float(hd));
    const double fwd_flops = 4.0 * double(B) * double(H) * double(hd) * double(T) * double(T) / 2;
    double sec[2] = {0, 0};
    {
      kc::CudnnSdpa sdpa(dev);
      auto fwd = [&] { sdpa.fwd(q, k, v, B, T, H, H, hd, scale, o, lse, cs); };
      auto bwd = [&] { sdpa.bwd(q, k, v, o, lse, dout, B, T, H, H, hd, scale, dq, dk, dv, cs); };
      auto timed = [&](auto&& run) {
        for (int i = 0; i < 3; ++i) run();
        st::cuda::CudaEvent t0, t1;
        t0.record(s);
        for (int64_t i = 0; i < iters; ++i) run();
        t1.record(s);
        return t1.seconds_since(t0) / double(iters);
      };
      sec[0] = timed(fwd);
      sec[1] = timed(bwd);
    }
    std::printf(
        "device: %s\n%s, causal, B %lld T %lld heads %lld head_dim %lld: fwd %.3f ms, "
        "bwd %.3f ms over %lld iterations\n",
        name.c_str(), kc::CudnnSdpa::description(), (long long)B, (long long)T, (long long)H,
        (long long)hd, sec[0] * 1e3, sec[1] * 1e3, (long long)iters);
    std::printf("attn_fwd_tflops=%.1f\nattn_bwd_tflops=%.1f\n", fwd_flops / sec[0] * 1e-12,
                2.5 * fwd_flops / sec[1] * 1e-12);
    dev.synchronize();
    for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                    static_cast<void*>(o), static_cast<void*>(dout), static_cast<void*>(dq),
                    static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(lse),
                    static_cast<void*>(f)})
      dev.deallocate(p, 0, st::MemCat::Other);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
