// The library-backed pieces of the CUDA backend against CPU references:
// cuBLASLt GEMM (kernels/cuda/gemm_lt.hpp) vs kernels::gemm, cuDNN fused
// attention (sdpa_cudnn.hpp) vs kernels::attention_fwd/bwd, and the device
// resources (caching allocator, pinned copy stream, event timer).
// Tolerances (close() in gpu_test_util.hpp):
//   GEMM bf16 output 1e-2, fp32 output 1e-3 (same bf16 inputs, fp32 sums in
//   another order); attention out and dq/dk/dv 1e-2 (cuDNN rounds P and dS
//   to bf16 before its matmuls), lse 1e-3.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "ctest/cuda/gpu_test_util.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/sdpa_cudnn.hpp"
#include "kernels/ops.hpp"

namespace kc = st::kernels::cuda;
namespace kk = st::kernels;
using namespace st::test;

namespace {
TEST(CudaGemm, MatchesCpuAllTransposes) {
  kc::GemmLt gemm;
  struct S {
    int64_t M, N, K;
  };
  for (auto [M, N, K] : {S{8, 8, 8}, S{128, 96, 64}, S{257, 130, 72}, S{1024, 768, 512}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      auto a = round_bf16(randn(M * K, 20 + t)), b = round_bf16(randn(K * N, 30 + t));
      auto da = upload(to_bf16(a)), db = upload(to_bf16(b));
      // bf16 output, beta = 0
      std::vector<float> ref(M * N, 0.f);
      kk::gemm(ta, tb, M, N, K, 1.f, a.data(), lda, b.data(), ldb, 0.f, ref.data(), N);
      auto dc = poisoned(M * N * 2);
      gemm.gemm(ta, tb, M, N, K, 1.f, da.as<bf16>(), lda, db.as<bf16>(), ldb, 0.f, dc.as<bf16>(), N,
                nullptr);
      EXPECT_TRUE(close(download_bf16(dc, M * N), ref, 1e-2, "gemm bf16 out"))
          << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb;
      // fp32 output accumulating (beta = 1), as for weight gradients
      auto c0 = randn(M * N, 40 + t);
      auto ref2 = c0;
      kk::gemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 1.f, ref2.data(), N);
      auto dc2 = upload(c0);
      gemm.gemm(ta, tb, M, N, K, 0.5f, da.as<bf16>(), lda, db.as<bf16>(), ldb, 1.f, dc2.as<float>(),
                N, nullptr);
      EXPECT_TRUE(close(download<float>(dc2, M * N), ref2, 1e-3, "gemm fp32 accumulate"))
          << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb;
    }
  }
  const size_t plans = gemm.cached_shapes();
  auto a = upload(to_bf16(randn(64, 1))), b = upload(to_bf16(randn(64, 2)));
  auto c = poisoned(64 * 2);
  gemm.gemm(false, false, 8, 8, 8, 1.f, a.as<bf16>(), 8, b.as<bf16>(), 8, 0.f, c.as<bf16>(), 8,
            nullptr);
  EXPECT_EQ(gemm.cached_shapes(), plans) << "a repeated shape must reuse its cached algorithm";
}

TEST(CudaSdpa, MatchesCpuAttentionFwdBwd) {
  kc::CudnnSdpa sdpa;
  std::printf("%s\n", kc::CudnnSdpa::description());
  struct S {
    int64_t B, T, Hq, Hkv, hd;
  };
  for (auto [B, T, Hq, Hkv, hd] : {S{1, 64, 4, 4, 64}, S{2, 128, 8, 2, 128}, S{1, 200, 4, 1, 64}}) {
    SCOPED_TRACE(::testing::Message()
                 << "B=" << B << " T=" << T << " Hq=" << Hq << " Hkv=" << Hkv << " hd=" << hd);
    const int64_t nq = B * T * Hq * hd, nk = B * T * Hkv * hd, nl = B * Hq * T;
    const float scale = 1.f / std::sqrt(float(hd));
    auto q = round_bf16(randn(nq, 50)), k = round_bf16(randn(nk, 51)),
         v = round_bf16(randn(nk, 52));
    auto dout = round_bf16(randn(nq, 53));
    std::vector<float> out(nq), lse(nl), dq(nq), dk(nk), dv(nk);
    kk::attention_fwd(q.data(), k.data(), v.data(), B, T, Hq, Hkv, hd, scale, out.data(),
                      lse.data());
    kk::attention_bwd(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), B, T, Hq,
                      Hkv, hd, scale, dq.data(), dk.data(), dv.data());
    auto dq_ = upload(to_bf16(q)), dk_ = upload(to_bf16(k)), dv_ = upload(to_bf16(v));
    auto ddo = upload(to_bf16(dout));
    auto dout_ = poisoned(nq * 2), dlse = poisoned(nl * 4);
    sdpa.fwd(dq_.as<bf16>(), dk_.as<bf16>(), dv_.as<bf16>(), B, T, Hq, Hkv, hd, scale,
             dout_.as<bf16>(), dlse.as<float>(), nullptr);
    EXPECT_TRUE(close(download_bf16(dout_, nq), out, 1e-2, "sdpa out"));
    EXPECT_TRUE(close(download<float>(dlse, nl), lse, 1e-3, "sdpa lse"));
    auto gq = poisoned(nq * 2), gk = poisoned(nk * 2), gv = poisoned(nk * 2);
    sdpa.bwd(dq_.as<bf16>(), dk_.as<bf16>(), dv_.as<bf16>(), dout_.as<bf16>(), dlse.as<float>(),
             ddo.as<bf16>(), B, T, Hq, Hkv, hd, scale, gq.as<bf16>(), gk.as<bf16>(), gv.as<bf16>(),
             nullptr);
    EXPECT_TRUE(close(download_bf16(gq, nq), dq, 1e-2, "sdpa dq"));
    EXPECT_TRUE(close(download_bf16(gk, nk), dk, 1e-2, "sdpa dk"));
    EXPECT_TRUE(close(download_bf16(gv, nk), dv, 1e-2, "sdpa dv"));
  }
  EXPECT_EQ(sdpa.cached_plans(), 6u);  // forward + backward per shape, built once
}

TEST(CudaDevice, AllocatorPinnedCopyTimer) {
  auto& alloc = st::cuda::DeviceAllocator::instance();
  const auto before = alloc.stats();
  const int64_t act0 = st::MemStats::current(st::MemCat::Activations);
  {
    st::cuda::DeviceBuffer a(3u << 20, st::MemCat::Activations);
    EXPECT_GE(st::MemStats::current(st::MemCat::Activations) - act0, int64_t(3u << 20));
  }
  EXPECT_EQ(st::MemStats::current(st::MemCat::Activations), act0);
  st::cuda::DeviceBuffer again(3u << 20, st::MemCat::Activations);
  const auto after = alloc.stats();
  EXPECT_GT(after.cache_hits, before.cache_hits) << "a freed block of the same size is reused";
  EXPECT_GE(after.in_use_peak, int64_t(3u << 20));

  // Device -> pinned host through the copy stream, ordered after compute.
  st::cuda::Stream compute;
  std::vector<float> h = randn(1 << 20, 60);
  auto d = upload(h);
  st::cuda::PinnedBuffer pin;
  pin.reserve(h.size() * 4);
  st::cuda::CopyStream cs;
  st::cuda::EventTimer t;
  {
    st::cuda::NvtxRange r("snapshot");
    t.start(compute.get());
    cs.copy_to_host(pin.data(), d.data(), h.size() * 4, compute.get());
    cs.sync();
    t.stop(compute.get());
  }
  EXPECT_EQ(std::memcmp(pin.data(), h.data(), h.size() * 4), 0);
  EXPECT_GE(t.seconds(), 0.0);
}
}  // namespace
