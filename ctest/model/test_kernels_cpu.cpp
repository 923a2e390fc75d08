// CPU kernels against references: every backward against central finite
// differences of its forward (fp32), GEMM against a naive loop, AdamW against
// the formula in double; the bf16 kernels bitwise repeatable across thread
// counts (kernels/ops.hpp's determinism promise).
//
// Tolerance (fp32): the probe loss is L = sum(out * R) with random R,
// accumulated in double; central differences with step 1e-2 have truncation
// error ~1e-5 and fp32 rounding noise ~1e-5 relative for these O(1) values.
// We require the norm-based relative error ||analytic - fd|| / ||fd|| < 2e-3.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/stochastic_round.hpp"
#include "tensor/dtype.hpp"

namespace k = st::kernels;
namespace {
using Vec = std::vector<float>;
constexpr double kFdStep = 1e-2;
constexpr double kFdTol = 2e-3;

Vec randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  Vec v(n);
  for (auto& x : v) x = scale * (float(rng() % 20001) / 10000.f - 1.f);  // uniform [-1, 1]
  return v;
}

double probe(const Vec& out, const Vec& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * double(r[i]);
  return s;
}

double rel_err(const Vec& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
}

// Central differences of f (which returns the probe loss) w.r.t. every element of x.
std::vector<double> fd_grad(Vec& x, const std::function<double()>& f) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = float(x0 + kFdStep);
    const double lp = f();
    x[i] = float(x0 - kFdStep);
    const double lm = f();
    x[i] = x0;
    g[i] = (lp - lm) / (2 * kFdStep);
  }
  return g;
}
}  // namespace

TEST(Kernels, GemmAllTransposesMatchNaive) {
  const int64_t M = 7, N = 5, K = 9;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Vec A = randn(size_t(M * K), 1), B = randn(size_t(K * N), 2), C = randn(size_t(M * N), 3);
      Vec ref = C;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t p = 0; p < K; ++p) {
            const float a = ta ? A[size_t(p * M + i)] : A[size_t(i * K + p)];
            const float b = tb ? B[size_t(j * K + p)] : B[size_t(p * N + j)];
            s += double(a) * b;
          }
          ref[size_t(i * N + j)] = float(0.5 * s + 0.25 * C[size_t(i * N + j)]);
        }
      k::gemm(ta, tb, M, N, K, 0.5f, A.data(), B.data(), 0.25f, C.data());
      for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], ref[i], 1e-5) << ta << tb << i;
    }
}

TEST(Kernels, GemmLibraryIsNamed) {
  const std::string s = k::gemm_library();
  EXPECT_NE(s.find("core"), std::string::npos) << s;
  std::cout << "gemm: " << s << "\n";
}

TEST(Kernels, EmbeddingBackwardMatchesFiniteDifferences) {
  const int64_t V = 6, d = 5, rows = 8;
  std::vector<int32_t> tok = {0, 3, 3, 5, 1, 0, 3, 2};
  Vec table = randn(size_t(V * d), 4), R = randn(size_t(rows * d), 5),
      out(static_cast<size_t>(rows * d));
  auto f = [&] {
    k::embedding_fwd(tok.data(), rows, table.data(), V, d, out.data());
    return probe(out, R);
  };
  Vec dtable(table.size(), 0.f);
  k::embedding_bwd(tok.data(), rows, R.data(), V, d, dtable.data());
  EXPECT_LT(rel_err(dtable, fd_grad(table, f)), kFdTol);
}

TEST(Kernels, RmsNormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, d = 70;  // d > one column block of the dw reduction
  Vec x = randn(size_t(rows * d), 6), w = randn(size_t(d), 7), R = randn(size_t(rows * d), 8);
  Vec y(x.size()), rstd(static_cast<size_t>(rows));
  auto f = [&] {
    k::rmsnorm_fwd(x.data(), w.data(), rows, d, 1e-5f, y.data(), rstd.data());
    return probe(y, R);
  };
  f();
  Vec dx(x.size(), 0.f), dw(w.size(), 0.f);
  k::rmsnorm_bwd(x.data(), w.data(), rstd.data(), R.data(), rows, d, dx.data(), dw.data(), false);
  EXPECT_LT(rel_err(dx, fd_grad(x, f)), kFdTol);
  EXPECT_LT(rel_err(dw, fd_grad(w, f)), kFdTol);
  // accumulate=true adds to dx.
  Vec dx2(x.size(), 1.f), dw2(w.size(), 0.f);
  k::rmsnorm_bwd(x.data(), w.data(), rstd.data(), R.data(), rows, d, dx2.data(), dw2.data(), true);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], dx[i] + 1.f);
}

TEST(Kernels, RopeBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, H = 3, hd = 8;
  Vec cs(static_cast<size_t>(T * hd / 2)), sn(cs.size());
  k::rope_table(T, hd, 10000.0, 0, cs.data(), sn.data());
  Vec x = randn(size_t(B * T * H * hd), 9), R = randn(x.size(), 10), y(x.size());
  auto f = [&] {
    y = x;
    k::rope_fwd(y.data(), B, T, H, hd, cs.data(), sn.data());
    return probe(y, R);
  };
  Vec dx = R;
  k::rope_bwd(dx.data(), B, T, H, hd, cs.data(), sn.data());
  EXPECT_LT(rel_err(dx, fd_grad(x, f)), kFdTol);
  // Position 0 is the identity; the rotation preserves each pair's norm.
  f();
  for (int64_t i = 0; i < H * hd; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], x[size_t(i)]);
}

TEST(Kernels, SwigluBackwardMatchesFiniteDifferences) {
  const int64_t n = 40;
  Vec g = randn(size_t(n), 11, 3.f), u = randn(size_t(n), 12), R = randn(size_t(n), 13),
      y(static_cast<size_t>(n));
  auto f = [&] {
    k::swiglu_fwd(g.data(), u.data(), n, y.data());
    return probe(y, R);
  };
  Vec dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
  k::swiglu_bwd(g.data(), u.data(), R.data(), n, dg.data(), du.data());
  EXPECT_LT(rel_err(dg, fd_grad(g, f)), kFdTol);
  EXPECT_LT(rel_err(du, fd_grad(u, f)), kFdTol);
}

class AttentionFd : public ::testing::TestWithParam<int> {};

TEST_P(AttentionFd, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, Hq = 4, Hkv = GetParam(), hd = 4;
  const float scale = 1.f / std::sqrt(float(hd));
  Vec q = randn(size_t(B * T * Hq * hd), 14), kk = randn(size_t(B * T * Hkv * hd), 15),
      v = randn(kk.size(), 16), R = randn(q.size(), 17);
  Vec out(q.size()), lse(static_cast<size_t>(B * Hq * T));
  auto f = [&] {
    k::attention_fwd(q.data(), kk.data(), v.data(), B, T, Hq, Hkv, hd, scale, out.data(),
                     lse.data());
    return probe(out, R);
  };
  f();
  Vec dq(q.size()), dk(kk.size()), dv(v.size());
  k::attention_bwd(q.data(), kk.data(), v.data(), out.data(), lse.data(), R.data(), B, T, Hq, Hkv,
                   hd, scale, dq.data(), dk.data(), dv.data());
  EXPECT_LT(rel_err(dq, fd_grad(q, f)), kFdTol);
  EXPECT_LT(rel_err(dk, fd_grad(kk, f)), kFdTol);
  EXPECT_LT(rel_err(dv, fd_grad(v, f)), kFdTol);
}
INSTANTIATE_TEST_SUITE_P(Kernels, AttentionFd, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "kv" + std::to_string(info.param); });

TEST(Kernels, AttentionIsCausalAndNormalised) {
  // Query 0 sees only key 0: its output is v[0] exactly, and lse = its score.
  const int64_t B = 1, T = 3, H = 1, hd = 2;
  Vec q = {1, 2, 3, 4, 5, 6}, kk = {1, 0, 0, 1, 1, 1}, v = {7, 8, 9, 10, 11, 12};
  Vec out(6), lse(3);
  k::attention_fwd(q.data(), kk.data(), v.data(), B, T, H, H, hd, 1.f, out.data(), lse.data());
  EXPECT_FLOAT_EQ(out[0], 7.f);
  EXPECT_FLOAT_EQ(out[1], 8.f);
  EXPECT_FLOAT_EQ(lse[0], 1.f);
}

// The three steps of the shard cross-entropy on the whole vocabulary (one
// shard): the mean loss over valid rows and the lse the backward needs.
double ce_mean(const Vec& x, const std::vector<int32_t>& tgt, int64_t rows, int64_t V, Vec& lse,
               int64_t* nv) {
  const size_t R = static_cast<size_t>(rows);
  Vec mx(R), se(R), tl(R), rl(R);
  k::ce_partial(x.data(), tgt.data(), rows, V, 0, mx.data(), se.data(), tl.data());
  k::ce_finish(mx.data(), se.data(), tl.data(), tgt.data(), rows, lse.data(), rl.data());
  *nv = 0;
  for (int32_t t : tgt) *nv += t >= 0;
  return k::loss_sum(rl.data(), tgt.data(), rows) / double(*nv);
}

TEST(Kernels, CrossEntropyBackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, V = 7;
  std::vector<int32_t> tgt = {3, 0, -1, 6, 2};  // -1 is ignored
  Vec x = randn(size_t(rows * V), 18, 3.f), lse(static_cast<size_t>(rows));
  int64_t nv = 0;
  std::function<double()> f = [&] { return ce_mean(x, tgt, rows, V, lse, &nv); };
  const double loss = f();
  EXPECT_EQ(nv, 4);
  // Direct: mean over the 4 valid rows of lse - x[target].
  double ref = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (tgt[size_t(r)] < 0) continue;
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(double(x[size_t(r * V + j)]));
    ref += std::log(s) - x[size_t(r * V + tgt[size_t(r)])];
  }
  EXPECT_NEAR(loss, ref / 4, 1e-5);
  Vec dx(x.size());
  k::ce_bwd(x.data(), tgt.data(), lse.data(), rows, V, 0, 1.f / float(nv), dx.data());
  EXPECT_LT(rel_err(dx, fd_grad(x, f)), kFdTol);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dx[size_t(2 * V + j)], 0.f);
  // In place, scaled (refresh lse: the finite differences left it perturbed).
  f();
  Vec y = x;
  k::ce_bwd(y.data(), tgt.data(), lse.data(), rows, V, 0, 2.f / float(nv), y.data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], 2.f * dx[i]);
}

TEST(Kernels, AdamwMatchesFormula) {
  const int64_t n = 10;
  Vec w = randn(size_t(n), 19), m(size_t(n), 0.f), v(size_t(n), 0.f);
  std::vector<double> wd(w.begin(), w.end()), md(size_t(n), 0), vd(size_t(n), 0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, decay = 0.1;
  for (int step = 1; step <= 3; ++step) {
    Vec g = randn(size_t(n), uint32_t(20 + step));
    k::adamw_step(w.data(), g.data(), m.data(), v.data(), n, float(lr), float(b1), float(b2),
                  float(eps), float(decay), step);
    for (int64_t i = 0; i < n; ++i) {
      const size_t s = size_t(i);
      md[s] = b1 * md[s] + (1 - b1) * g[s];
      vd[s] = b2 * vd[s] + (1 - b2) * g[s] * g[s];
      const double mh = md[s] / (1 - std::pow(b1, step)), vh = vd[s] / (1 - std::pow(b2, step));
      wd[s] -= lr * (decay * wd[s] + mh / (std::sqrt(vh) + eps));
    }
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(w[size_t(i)], wd[size_t(i)], 1e-6);
}

// Stochastic rounding (kernels/stochastic_round.hpp): each value rounds to
// one of its two bf16 neighbours, up with the probability of the dropped
// bits, so the mean over many positions is the value itself (within 4
// standard errors), where round-to-nearest is off by up to half an ulp.
TEST(Kernels, StochasticRoundingIsUnbiased) {
  namespace sr = st::sround;
  for (float x : {1.00390625f * 1.3f, -3.0e-3f * 1.7f, 1234.567f, 1.0f + 0x1p-10f}) {
    const int kN = 200000;
    double sum = 0;
    const uint32_t s = sr::stream(7u, 99u);
    for (int i = 0; i < kN; ++i) {
      const float r = st::bf16_to_f32(sr::to_bf16(x, sr::bits(s, uint64_t(i))));
      const float down = st::bf16_to_f32(uint16_t(sr::f32_bits(x) >> 16));
      const float up = st::bf16_to_f32(uint16_t((sr::f32_bits(x) >> 16) + 1));
      ASSERT_TRUE(r == down || r == up) << x << " -> " << r;
      sum += r;
    }
    const double ulp = std::fabs(double(st::bf16_to_f32(uint16_t((sr::f32_bits(x) >> 16) + 1))) -
                                 st::bf16_to_f32(uint16_t(sr::f32_bits(x) >> 16)));
    EXPECT_NEAR(sum / kN, x, 4 * 0.5 * ulp / std::sqrt(double(kN))) << x;
  }
  // Infinities stay, NaN stays NaN; the bits are a pure function of (seed, key, pos).
  EXPECT_EQ(sr::to_bf16(INFINITY, 0xffffu), st::f32_to_bf16(INFINITY));
  EXPECT_TRUE(std::isnan(st::bf16_to_f32(sr::to_bf16(NAN, 0x1234u))));
  EXPECT_EQ(sr::bits(sr::stream(1, 2), 3), sr::bits(sr::stream(1, 2), 3));
  EXPECT_NE(sr::bits(sr::stream(1, 2), 3), sr::bits(sr::stream(2, 2), 3));
}

// bf16 AdamW state: updates far below half a bf16 ulp of the weight still
// move it in expectation (round-to-nearest would leave every weight where it
// is), and the mean over many elements follows the fp32 kernel.
TEST(Kernels, AdamwBf16StateFollowsFp32InExpectation) {
  const int64_t n = 1 << 16;
  Vec w32(size_t(n), 1.0f), m32(size_t(n), 0.f), v32(size_t(n), 0.f);
  std::vector<uint16_t> w(size_t(n), st::f32_to_bf16(1.0f)), m(size_t(n), 0), v(size_t(n), 0);
  const float lr = 2e-4f;  // each step moves w by ~lr: 1/20 of bf16's ulp at 1.0 (2^-7)
  for (int step = 1; step <= 20; ++step) {
    const Vec g(size_t(n), 0.5f);
    k::adamw_step(w32.data(), g.data(), m32.data(), v32.data(), n, lr, 0.9f, 0.95f, 1e-8f, 0.f,
                  step);
    k::adamw_step_bf16(w.data(), g.data(), m.data(), v.data(), n, lr, 0.9f, 0.95f, 1e-8f, 0.f, step,
                       1.f, uint32_t(step), 5u, 0);
  }
  double mean = 0;
  for (uint16_t h : w) mean += st::bf16_to_f32(h);
  mean /= double(n);
  const double moved32 = 1.0 - w32[0];
  ASSERT_GT(moved32, 3e-3);  // 20 steps of ~2e-4
  EXPECT_NEAR(1.0 - mean, moved32, 0.03 * moved32);
  // Round-to-nearest of the same updates leaves the weight at 1.0.
  EXPECT_EQ(st::round_bf16(1.0f - lr), 1.0f);
}

// The bf16 attention (through the bf16 GEMM), SwiGLU, RMSNorm and
// cross-entropy kernels give bitwise the same outputs, parameter gradients
// included, with 1 and with 2 OpenMP threads, at shapes large enough for
// their OpenMP teams.
TEST(Kernels, Bf16KernelsRepeatBitwiseAcrossThreadCounts) {
  const int64_t B = 2, T = 128, H = 4, hd = 64, rows = B * T, d = H * hd, V = 1024;
  auto bf = [](size_t n, uint32_t seed) {
    const Vec x = randn(n, seed);
    std::vector<uint16_t> h(n);
    k::narrow_bf16(x.data(), int64_t(n), h.data());
    return h;
  };
  const size_t n = size_t(rows * d);
  const auto q = bf(n, 1), kk = bf(n, 2), v = bf(n, 3), g = bf(n, 4), w = bf(size_t(d), 5),
             logits = bf(size_t(rows * V), 6);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = int32_t((r * 37) % V);
  using H16 = std::vector<uint16_t>;
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    H16 out(n), dq(n), dk(n), dv(n), dg(n), du(n), y(n), dx(n), dl(size_t(rows * V));
    Vec lse(size_t(B * H * T)), rstd(static_cast<size_t>(rows)), dw(size_t(d), 0.f),
        ce_lse(size_t(rows), 7.f);
    k::attention_fwd(q.data(), kk.data(), v.data(), B, T, H, H, hd, 0.125f, out.data(), lse.data());
    k::attention_bwd(q.data(), kk.data(), v.data(), out.data(), lse.data(), g.data(), B, T, H, H,
                     hd, 0.125f, dq.data(), dk.data(), dv.data());
    k::swiglu_bwd(q.data(), kk.data(), g.data(), int64_t(n), dg.data(), du.data());
    k::rmsnorm_fwd(q.data(), w.data(), rows, d, 1e-5f, y.data(), rstd.data());
    k::rmsnorm_bwd(q.data(), w.data(), rstd.data(), g.data(), rows, d, dx.data(), dw.data(), false);
    k::ce_bwd(logits.data(), targets.data(), ce_lse.data(), rows, V, 0, 0.5f, dl.data());
    return std::make_tuple(out, lse, dq, dk, dv, dg, du, y, dx, dw, dl);
  };
  const int before = omp_get_max_threads();
  const auto one = run(1), two = run(2);
  omp_set_num_threads(before);
  EXPECT_TRUE(one == two);
  // Not all zeros (a kernel that wrote nothing would repeat too).
  EXPECT_NE(std::get<0>(one), H16(n));
  EXPECT_NE(std::get<2>(one), H16(n));
  EXPECT_NE(std::get<10>(one), H16(size_t(rows * V)));
}
