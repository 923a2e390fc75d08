// scaletrain-bench-attention: the causal attention rate this GPU reaches
// through the backend's cuDNN fused SDPA (bf16, the op the trainer runs),
// forward and backward, for scaletrain-plan calibrate-gpu's `rates.attention`.
// Usage: scaletrain-bench-attention [--block] T head_dim heads tokens
// [iterations]: batch = tokens / T sequences of T, `heads` query and KV
// heads. FLOPs are counted as lib/plan/ops.cpp counts them (the causal
// half: forward 4 B H hd T^2 / 2, backward 2.5 times that). Prints
// "attn_fwd_tflops=<x>" and "attn_bwd_tflops=<y>" last.
// --block: also the ring-attention blocks of a rank holding T tokens of the
// zig-zag split (chunks r and 2cp-1-r of 2cp; cp 4, rank 1), through the
// backend's Ops as the trainer calls them (attention_fwd_block /
// attention_bwd_block: the path runtime.attn_path and the backend choose):
// its diagonal block (its own keys) and an off-diagonal one (rank 0's).
// Each holds T^2 / 2 unmasked (query, key) pairs, the FLOPs counted; printed
// beside the full-sequence rate as "block_diag_fwd_tflops=",
// "block_diag_bwd_tflops=", "block_full_fwd_tflops=" and
// "block_full_bwd_tflops=" (before the two lines above). Exit 77 when no
// GPU is visible, 2 on a usage error.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/bench_util.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/sdpa_cudnn.hpp"

namespace {
// Global positions of the zig-zag split of a sequence of cp x T tokens:
// rank r holds chunks r and 2cp-1-r of C = T / 2 tokens (lib/model's
// cp_positions; the model library is not linked here).
std::vector<int32_t> zigzag_positions(int r, int64_t T, int cp) {
  const int64_t C = T / 2;
  std::vector<int32_t> p(static_cast<size_t>(T));
  for (int64_t t = 0; t < C; ++t) {
    p[size_t(t)] = int32_t(r * C + t);
    p[size_t(C + t)] = int32_t((2 * cp - 1 - r) * C + t);
  }
  return p;
}

// The diagonal and full ring blocks' times (r[off][fwd, bwd]) against the
// full-sequence kernel's, and their TFLOP/s lines (each block holds T^2 / 2
// unmasked pairs: the causal FLOP count of T).
void print_blocks(const double (&r)[2][2], double fwd, double bwd, double fwd_flops) {
  const char* kind[2] = {"diag", "full"};
  for (int off = 0; off < 2; ++off) {
    const double bf = fwd_flops / r[off][0] * 1e-12, bb = 2.5 * fwd_flops / r[off][1] * 1e-12;
    std::printf("%s block: fwd %.3f ms (%.2f of the full-sequence rate), bwd %.3f ms (%.2f)\n",
                kind[off], r[off][0] * 1e3, fwd / r[off][0], r[off][1] * 1e3, bwd / r[off][1]);
    std::printf("block_%s_fwd_tflops=%.1f\nblock_%s_bwd_tflops=%.1f\n", kind[off], bf, kind[off],
                bb);
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (st::cuda::device_count(&why) == 0) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  const bool blocks = argc >= 2 && std::string(argv[1]) == "--block";
  const int a0 = blocks ? 2 : 1;  // the first positional argument
  const bool have = argc >= a0 + 4 && argc <= a0 + 5;
  const int64_t T = have ? std::atoll(argv[a0]) : 0, hd = have ? std::atoll(argv[a0 + 1]) : 0,
                H = have ? std::atoll(argv[a0 + 2]) : 0,
                tokens = have ? std::atoll(argv[a0 + 3]) : 0,
                iters = have && argc == a0 + 5 ? std::atoll(argv[a0 + 4]) : 20;
  constexpr int kCp = 4, kRank = 1;  // the ring the blocks come from
  if (T < 1 || hd < 1 || H < 1 || tokens < T || tokens % T != 0 || iters < 1 ||
      (blocks && T % 2 != 0)) {
    std::fprintf(stderr,
                 "usage: scaletrain-bench-attention [--block] T head_dim heads tokens "
                 "[iterations]; tokens a multiple of T, all >= 1 (T even with --block)\n");
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
    if (blocks) {
      const int64_t C = T / 2;
      auto zigzag = [&](int r) { return zigzag_positions(r, T, kCp); };
      auto upload = [&](const std::vector<int32_t>& h) {
        auto* d = static_cast<int32_t*>(buf(h.size() * sizeof(int32_t)));
        ST_CUDA_CHECK(
            cudaMemcpyAsync(d, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, cs));
        return d;
      };
      const int32_t* qpos = upload(zigzag(kRank));
      const int32_t* kpos_off = upload(zigzag(0));
      dev->synchronize();
      const auto ops = st::cuda::make_cuda_ops(*dev);
      auto* acc = static_cast<float*>(buf(size_t(n) * 3 * 4));  // dq, dk, dv accumulators
      // Each block holds T^2 / 2 unmasked pairs: the causal FLOP count of T.
      double r[2][2] = {};
      for (int off = 0; off < 2; ++off) {
        const int32_t* kpos = off ? kpos_off : qpos;
        r[off][0] = bench::seconds_per_call(s, 3, iters, [&] {
          ops->attention_fwd_block(s, q, k, v, B, T, T, H, H, hd, scale, qpos, kpos, o, lse,
                                   st::DType::BF16);
        });
        r[off][1] = bench::seconds_per_call(s, 3, iters, [&] {
          ops->attention_bwd_block(s, q, k, v, o, lse, dout, B, T, T, H, H, hd, scale, qpos, kpos,
                                   acc, acc + n, acc + 2 * n, st::DType::BF16);
        });
      }
      std::printf("ring blocks (cp %d, rank %d, chunk %lld), through: %s\n", kCp, kRank,
                  (long long)C, ops->describe().c_str());
      print_blocks(r, fwd, bwd, fwd_flops);
    }
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
