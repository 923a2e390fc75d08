// The CPU GEMM paths against a plain reference: the fp32 sgemm (OpenBLAS),
// the bf16 GEMM through oneDNN (where the build has it and the CPU has bf16
// instructions) and the widening fallback, each on odd shapes, all four
// transposes, row strides wider than the matrices (the padding holds values
// that would show if read, and C's padding must stay untouched), alpha and
// beta, fp32 and bf16 output; and gemm_bf16's choice between them (run a
// second time under DNNL_MAX_CPU_ISA=AVX512_CORE, a CPU without bf16
// instructions as oneDNN sees it: then the fallback must run).
//
// Tolerance, per element: the reference is the exact sum in double of the
// stored (bf16 or fp32) inputs; an fp32 accumulation of K products is within
// 2 K 2^-24 of the sum of |alpha a b| + |beta c|, and a bf16 output adds half
// a bf16 ulp of the value (at most 2^-8 relative: 8 significant bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "scaletrain/build_config.hpp"
#include "tensor/dtype.hpp"

namespace k = st::kernels;
namespace {
struct Case {
  int64_t M, N, K;
};
// Odd sizes, a vector, a single element, sizes past oneDNN's and OpenBLAS's
// register blocks, and K = 0 (C = beta C).
const Case kCases[] = {{1, 1, 1},     {7, 5, 9},      {1, 33, 17}, {33, 1, 65},
                       {65, 130, 31}, {129, 67, 200}, {5, 6, 0}};
constexpr float kPad = 4096.f;  // in every operand's padding: visible if read, exact in bf16

// A rows x cols operand stored with row stride ld >= cols, padding = kPad.
std::vector<float> operand(int64_t rows, int64_t cols, int64_t ld, uint32_t seed, bool bf16) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(size_t(std::max<int64_t>(rows * ld, 1)), kPad);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float v = u(rng);
      x[size_t(i * ld + j)] = bf16 ? st::round_bf16(v) : v;
    }
  return x;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = st::f32_to_bf16(x[i]);
  return h;
}

using Bf16Gemm =
    std::function<void(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                       const uint16_t*, int64_t, float, void*, int64_t, bool)>;

// Runs one path (bf16: `f`; fp32: k::gemm) over every case, transpose,
// stride, alpha, beta and output type, checking each element.
void check_all(const Bf16Gemm& f, bool bf16_in) {
  int checked = 0;
  for (const Case& cs : kCases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int64_t pad : {0, 3})
          for (float alpha : {1.f, 0.5f})
            for (float beta : {0.f, 1.f, -0.75f})
              for (bool c_bf16 : {false, true}) {
                if (c_bf16 && !bf16_in) continue;
                const int64_t M = cs.M, N = cs.N, K = cs.K;
                const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
                const int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
                const auto A = operand(ar, ac, lda, 1, bf16_in),
                           B = operand(br, bc, ldb, 2, bf16_in);
                const auto C0 = operand(M, N, ldc, 3, c_bf16);
                std::vector<float> C = C0;
                std::vector<uint16_t> Ch = to_bf16(C0);
                if (!bf16_in) {
                  k::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(),
                          ldc);
                } else {
                  const auto Ah = to_bf16(A), Bh = to_bf16(B);
                  f(ta, tb, M, N, K, alpha, Ah.data(), lda, Bh.data(), ldb, beta,
                    c_bf16 ? static_cast<void*>(Ch.data()) : static_cast<void*>(C.data()), ldc,
                    c_bf16);
                  if (c_bf16)
                    for (size_t i = 0; i < C.size(); ++i) C[i] = st::bf16_to_f32(Ch[i]);
                }
                for (int64_t i = 0; i < M; ++i)
                  for (int64_t j = 0; j < ldc; ++j) {
                    const size_t at = size_t(i * ldc + j);
                    const std::string where =
                        "M N K " + std::to_string(M) + " " + std::to_string(N) + " " +
                        std::to_string(K) + " ta " + std::to_string(ta) + " tb " +
                        std::to_string(tb) + " pad " + std::to_string(pad) + " alpha " +
                        std::to_string(alpha) + " beta " + std::to_string(beta) + " c_bf16 " +
                        std::to_string(c_bf16) + " at " + std::to_string(at);
                    if (j >= N) {  // C's padding is never written
                      ASSERT_EQ(C[at], C0[at]) << where;
                      continue;
                    }
                    double s = 0, mag = 0;
                    for (int64_t p = 0; p < K; ++p) {
                      const double a = A[size_t(ta ? p * lda + i : i * lda + p)];
                      const double b = B[size_t(tb ? j * ldb + p : p * ldb + j)];
                      s += a * b;
                      mag += std::fabs(a * b);
                    }
                    const double want = double(alpha) * s + double(beta) * C0[at];
                    mag = std::fabs(alpha) * mag + std::fabs(beta * C0[at]);
                    const double tol = 2.0 * double(K + 1) * std::ldexp(1.0, -24) * mag +
                                       (c_bf16 ? std::ldexp(std::fabs(want), -8) : 0.0) + 1e-30;
                    ASSERT_LE(std::fabs(C[at] - want), tol)
                        << where << ": got " << C[at] << ", want " << want;
                    ++checked;
                  }
              }
  EXPECT_GT(checked, 100000);
}

bool isa_lowered() { return std::getenv("DNNL_MAX_CPU_ISA") != nullptr; }
bool cpu_has_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}
}  // namespace

TEST(Gemm, Fp32MatchesReference) { check_all(nullptr, false); }

TEST(Gemm, Bf16WidenedMatchesReference) { check_all(k::gemm_bf16_widened, true); }

TEST(Gemm, Bf16OneDnnMatchesReference) {
  if (!k::gemm_bf16_native()) GTEST_SKIP() << "no native bf16 GEMM: " << k::gemm_bf16_library();
  check_all(k::gemm_bf16_onednn, true);
}

TEST(Gemm, Bf16DispatchMatchesReference) { check_all(k::gemm_bf16, true); }

// gemm_bf16 runs oneDNN exactly where it should: built with it, on a CPU
// with bf16 instructions, and not lowered by DNNL_MAX_CPU_ISA (the ctest run
// test_gemm_cpu_no_bf16 lowers it to AVX512_CORE: then the fallback).
TEST(Gemm, Bf16ChoiceFollowsBuildAndCpu) {
  const std::string what = k::gemm_bf16_library();
  std::cout << "bf16 gemm: " << what << "\n";
  const bool want = SCALETRAIN_HAVE_ONEDNN && cpu_has_bf16() && !isa_lowered();
  EXPECT_EQ(k::gemm_bf16_native(), want) << what;
  if (want) {
    EXPECT_NE(what.find("oneDNN"), std::string::npos) << what;
    EXPECT_EQ(what.find("ref"), std::string::npos) << "a reference (slow) kernel ran: " << what;
  } else {
    EXPECT_NE(what.find("widened"), std::string::npos) << what;
    if (!k::gemm_bf16_native()) {
      std::vector<uint16_t> a(4), b(4);
      std::vector<float> c(4);
      EXPECT_THROW(k::gemm_bf16_onednn(false, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f,
                                       c.data(), 2, false),
                   std::exception);
    }
  }
}

// Many threads at once on different shapes (the attention tiles and the
// strict device's stream workers call the GEMM from their own threads).
TEST(Gemm, Bf16ConcurrentCallsMatchSerial) {
  const int n_shapes = 8;
  std::vector<std::vector<float>> serial(n_shapes), par(n_shapes * 4);
  auto one = [](int s, std::vector<float>& out) {
    const int64_t M = 17 + 8 * s, N = 40 - s, K = 64 + s;
    const auto A = to_bf16(operand(M, K, K, 10 + s, true)),
               B = to_bf16(operand(K, N, N, 20 + s, true));
    out.assign(size_t(M * N), 0.f);
    k::gemm_bf16(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, out.data(), N, false);
  };
  for (int s = 0; s < n_shapes; ++s) one(s, serial[size_t(s)]);
#pragma omp parallel for schedule(dynamic) num_threads(4)
  for (int s = 0; s < n_shapes * 4; ++s) one(s % n_shapes, par[size_t(s)]);
  for (int s = 0; s < n_shapes * 4; ++s) {
    const auto& want = serial[size_t(s % n_shapes)];
    ASSERT_EQ(par[size_t(s)].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(par[size_t(s)][i], want[i], 1e-4f) << s << " " << i;
  }
}
