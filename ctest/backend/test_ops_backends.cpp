// Every Ops method (kernels/ops.hpp) on the backend named by
// SCALETRAIN_TEST_BACKEND (cpu, cpu-strict, cuda) against the CPU fp32
// kernels (kernels/cpu/cpu_kernels.hpp) run on the same stored inputs, in
// every compute dtype the backend runs. Registered for cpu and cpu-strict
// (label unit) and for cuda (label gpu: exits 77, skipped, where the backend
// library or a GPU is missing).
//
// Tolerance, as max |got - want| / max |want| per output: fp32 on CPU 2e-6
// (the same kernels; the strict device only moves them to another thread);
// bf16 on CPU 4e-3 (the reference is fp32 on the bf16-stored inputs, so the
// only difference is the rounding of the output to bf16: half an ulp, 2^-9
// of the value); bf16 on CUDA 1.6e-2 (a different fp32 summation order plus
// the same rounding). Attention in bf16 gets 1.6e-2 on every backend, and
// 1e-2 for the block backward's fp32 accumulators: cuDNN's fused attention
// and the CPU's bf16 attention both round the probabilities P (and dS) to
// bf16 before the GEMMs that read them, an error of up to 2^-9 of each
// element that the fp32 reference does not make.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "ops_test_util.hpp"

using namespace opt;
namespace k = st::kernels;
using st::DType;

namespace {
st::Backend* g_be = nullptr;
bool on_cuda() { return backend_name() == "cuda"; }

st::AdamWSpan f32_span(float* w, const float* g, float* m, float* v, void* wc, DType wc_t,
                       int64_t n, bool decay) {
  st::AdamWSpan a;
  a.w = w, a.g = g, a.m = m, a.v = v, a.wc = wc, a.wc_t = wc_t, a.n = n, a.decay = decay;
  return a;
}

class Ops : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (on_cuda() && GetParam() == DType::F32) GTEST_SKIP() << "the CUDA backend computes in bf16";
  }
  DType t() const { return GetParam(); }
  double tol() const { return t() == DType::F32 ? 2e-6 : on_cuda() ? 1.6e-2 : 4e-3; }
  double attn_tol() const { return t() == DType::F32 ? 2e-6 : 1.6e-2; }
  Bench b{*g_be};
};

TEST_P(Ops, Gemm) {
  const int64_t M = 24, N = 40, K = 56;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f})
        for (DType c : {DType::F32, t()}) {
          const Vec A = stored(randn(static_cast<size_t>(M * K), 1), t()),
                    B = stored(randn(static_cast<size_t>(K * N), 2), t());
          const Vec C0 = stored(randn(static_cast<size_t>(M * N), 3), c);
          Vec want = C0;
          k::gemm(ta, tb, M, N, K, 1.f, A.data(), B.data(), beta, want.data());
          auto a = b.up(A, t()), bb = b.up(B, t()), cc = b.up(C0, c);
          b.ops().gemm(b.s(), ta, tb, M, N, K, 1.f, a.raw(), ta ? M : K, bb.raw(), tb ? K : N, t(),
                       beta, cc.raw(), N, c);
          EXPECT_LT(rel(b.down(cc), want), tol()) << ta << tb << beta << st::dtype_name(c);
        }
}

TEST_P(Ops, CastAddScale) {
  const Vec x = randn(1000, 4), y = randn(1000, 5);
  auto xf = b.up(x, DType::F32), xt = b.empty(x.size(), t()), back = b.empty(x.size(), DType::F32);
  b.ops().cast(b.s(), xf.raw(), DType::F32, xt.raw(), t(), int64_t(x.size()));
  b.ops().cast(b.s(), xt.raw(), t(), back.raw(), DType::F32, int64_t(x.size()));
  EXPECT_EQ(b.down(back), stored(x, t()));  // rounding is exact: round to nearest even
  auto yt = b.up(y, t());
  b.ops().add(b.s(), yt.raw(), xt.raw(), int64_t(x.size()), t());
  Vec want(x.size());
  const Vec xs = stored(x, t()), ys = stored(y, t());
  for (size_t i = 0; i < x.size(); ++i) want[i] = xs[i] + ys[i];
  EXPECT_LT(rel(b.down(yt), want), tol());
  b.ops().scale(b.s(), xf.data(), int64_t(x.size()), 0.25f);
  Vec q = x;
  for (auto& v : q) v *= 0.25f;
  EXPECT_EQ(b.down(xf), q);
}

TEST_P(Ops, EmbeddingShards) {
  const int64_t rows = 20, V = 32, d = 24, v0 = 8, vl = 16;
  std::vector<int32_t> tok(rows);
  for (int64_t r = 0; r < rows; ++r) tok[static_cast<size_t>(r)] = int32_t((r * 7) % V);
  const Vec table = stored(randn(static_cast<size_t>(vl * d), 6), t()),
            dout = stored(randn(static_cast<size_t>(rows * d), 7), t());
  Vec want(static_cast<size_t>(rows * d)), dwant(static_cast<size_t>(vl * d), 0.5f);
  k::embedding_fwd_shard(tok.data(), rows, table.data(), v0, vl, d, want.data());
  k::embedding_bwd_shard(tok.data(), rows, dout.data(), v0, vl, d, dwant.data());
  auto tk = b.up_i32(tok), tb = b.up(table, t()), out = b.empty(static_cast<size_t>(rows * d), t());
  auto g = b.up(dout, t()), dt = b.up(Vec(static_cast<size_t>(vl * d), 0.5f), DType::F32);
  b.ops().embedding_fwd(b.s(), tk.as<int32_t>(), rows, tb.raw(), v0, vl, d, out.raw(), t());
  b.ops().embedding_bwd(b.s(), tk.as<int32_t>(), rows, g.raw(), v0, vl, d, dt.data(), t());
  EXPECT_EQ(b.down(out), want);  // a copy: exact
  EXPECT_LT(rel(b.down(dt), dwant), t() == DType::F32 ? 2e-6 : 2e-6 * rows);
}

TEST_P(Ops, RmsNorm) {
  const int64_t rows = 16, d = 48;
  const Vec x = stored(randn(static_cast<size_t>(rows * d), 8), t()),
            w = stored(randn(static_cast<size_t>(d), 9), t());
  const Vec dy = stored(randn(static_cast<size_t>(rows * d), 10), t()),
            dx0 = stored(randn(static_cast<size_t>(rows * d), 11), t());
  Vec y(x.size()), rstd(static_cast<size_t>(rows));
  k::rmsnorm_fwd(x.data(), w.data(), rows, d, 1e-5f, y.data(), rstd.data());
  auto xd = b.up(x, t()), wd = b.up(w, t()), yd = b.empty(x.size(), t()),
       rd = b.empty(static_cast<size_t>(rows), DType::F32);
  b.ops().rmsnorm_fwd(b.s(), xd.raw(), wd.raw(), rows, d, 1e-5f, yd.raw(), rd.data(), t());
  EXPECT_LT(rel(b.down(yd), y), tol());
  EXPECT_LT(rel(b.down(rd), rstd), t() == DType::F32 ? 2e-6 : 1e-5);
  for (bool acc : {false, true}) {
    Vec dx = dx0, dw(static_cast<size_t>(d), 0.25f);
    k::rmsnorm_bwd(x.data(), w.data(), rstd.data(), dy.data(), rows, d, dx.data(), dw.data(), acc);
    auto dyd = b.up(dy, t()), dxd = b.up(dx0, t()),
         dwd = b.up(Vec(static_cast<size_t>(d), 0.25f), DType::F32);
    auto rs = b.up(rstd, DType::F32);
    b.ops().rmsnorm_bwd(b.s(), xd.raw(), wd.raw(), rs.data(), dyd.raw(), rows, d, dxd.raw(),
                        dwd.data(), acc, t());
    EXPECT_LT(rel(b.down(dxd), dx), tol()) << "accumulate " << acc;
    EXPECT_LT(rel(b.down(dwd), dw), t() == DType::F32 ? 2e-6 : 1e-4) << "accumulate " << acc;
  }
}

TEST_P(Ops, RopeAndItsInverse) {
  const int64_t B = 2, T = 12, H = 3, hd = 16;
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    pos[static_cast<size_t>(i)] = int32_t(3 * i + 1);  // any positions
  Vec c(static_cast<size_t>(T * hd / 2)), s(c.size());
  st::rope_tables(pos.data(), T, hd, 10000.0, c.data(), s.data());
  const Vec x = stored(randn(static_cast<size_t>(B * T * H * hd), 12), t());
  for (bool inv : {false, true}) {
    Vec want = x;
    if (inv)
      k::rope_bwd(want.data(), B, T, H, hd, c.data(), s.data());
    else
      k::rope_fwd(want.data(), B, T, H, hd, c.data(), s.data());
    auto xd = b.up(x, t()), cd = b.up(c, DType::F32), sd = b.up(s, DType::F32);
    b.ops().rope(b.s(), xd.raw(), B, T, H, hd, cd.data(), sd.data(), inv, t());
    EXPECT_LT(rel(b.down(xd), want), tol()) << "inverse " << inv;
  }
}

TEST_P(Ops, SwigluInPlaceBackward) {
  const int64_t n = 999;
  const Vec g = stored(randn(static_cast<size_t>(n), 13, 2.f), t()),
            u = stored(randn(static_cast<size_t>(n), 14), t());
  const Vec dout = stored(randn(static_cast<size_t>(n), 15), t());
  Vec out(static_cast<size_t>(n)), dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
  k::swiglu_fwd(g.data(), u.data(), n, out.data());
  k::swiglu_bwd(g.data(), u.data(), dout.data(), n, dg.data(), du.data());
  auto gd = b.up(g, t()), ud = b.up(u, t()), od = b.empty(static_cast<size_t>(n), t()),
       dd = b.up(dout, t());
  b.ops().swiglu_fwd(b.s(), gd.raw(), ud.raw(), n, od.raw(), t());
  EXPECT_LT(rel(b.down(od), out), tol());
  b.ops().swiglu_bwd(b.s(), gd.raw(), ud.raw(), dd.raw(), n, gd.raw(), ud.raw(), t());  // in place
  EXPECT_LT(rel(b.down(gd), dg), tol());
  EXPECT_LT(rel(b.down(ud), du), tol());
}

struct Attn {
  int64_t B = 2, T = 32, Hq = 4, Hkv = 2, hd = 64;
  float scale = 0.125f;
  Vec q, k, v, dout;
  Attn(DType t) {
    q = stored(randn(static_cast<size_t>(B * T * Hq * hd), 16), t);
    k = stored(randn(static_cast<size_t>(B * T * Hkv * hd), 17), t);
    v = stored(randn(static_cast<size_t>(B * T * Hkv * hd), 18), t);
    dout = stored(randn(static_cast<size_t>(B * T * Hq * hd), 19), t);
  }
};

TEST_P(Ops, CausalAttention) {
  Attn a(t());
  Vec out(a.q.size()), lse(static_cast<size_t>(a.B * a.Hq * a.T)), dq(a.q.size()), dk(a.k.size()),
      dv(a.v.size());
  k::attention_fwd(a.q.data(), a.k.data(), a.v.data(), a.B, a.T, a.Hq, a.Hkv, a.hd, a.scale,
                   out.data(), lse.data());
  // The backward from the stored (rounded) output, as the model keeps it.
  const Vec out_s = stored(out, t());
  k::attention_bwd(a.q.data(), a.k.data(), a.v.data(), out_s.data(), lse.data(), a.dout.data(), a.B,
                   a.T, a.Hq, a.Hkv, a.hd, a.scale, dq.data(), dk.data(), dv.data());
  auto q = b.up(a.q, t()), kk = b.up(a.k, t()), v = b.up(a.v, t()), go = b.up(a.dout, t());
  auto o = b.empty(a.q.size(), t()), l = b.empty(lse.size(), DType::F32);
  b.ops().attention_fwd(b.s(), q.raw(), kk.raw(), v.raw(), a.B, a.T, a.Hq, a.Hkv, a.hd, a.scale,
                        o.raw(), l.data(), t());
  EXPECT_LT(rel(b.down(o), out), attn_tol());
  EXPECT_LT(rel(b.down(l), lse), t() == DType::F32 ? 2e-6 : 1e-3);
  auto ob = b.up(out_s, t()), lb = b.up(lse, DType::F32);
  auto gq = b.empty(dq.size(), t()), gk = b.empty(dk.size(), t()), gv = b.empty(dv.size(), t());
  b.ops().attention_bwd(b.s(), q.raw(), kk.raw(), v.raw(), ob.raw(), lb.data(), go.raw(), a.B, a.T,
                        a.Hq, a.Hkv, a.hd, a.scale, gq.raw(), gk.raw(), gv.raw(), t());
  EXPECT_LT(rel(b.down(gq), dq), attn_tol());
  EXPECT_LT(rel(b.down(gk), dk), attn_tol());
  EXPECT_LT(rel(b.down(gv), dv), attn_tol());
}

// Ring attention's block form: two K/V blocks of a load-balanced split,
// merged by log-sum-exp, equal the block over the whole key set; the block
// backward adds into fp32 accumulators.
TEST_P(Ops, AttentionBlocksAndMerge) {
  Attn a(t());
  const int64_t Th = a.T / 2;
  std::vector<int32_t> qpos(static_cast<size_t>(a.T)), kpos0(static_cast<size_t>(Th)),
      kpos1(static_cast<size_t>(Th));
  for (int64_t i = 0; i < a.T; ++i) qpos[static_cast<size_t>(i)] = int32_t(i);
  for (int64_t i = 0; i < Th; ++i)
    kpos0[static_cast<size_t>(i)] = int32_t(i), kpos1[static_cast<size_t>(i)] = int32_t(Th + i);
  auto half = [&](const Vec& x, int64_t H, int64_t part) {  // keys [part*Th, (part+1)*Th)
    Vec r;
    for (int64_t bb = 0; bb < a.B; ++bb)
      r.insert(r.end(), x.begin() + (bb * a.T + part * Th) * H * a.hd,
               x.begin() + (bb * a.T + (part + 1) * Th) * H * a.hd);
    return r;
  };
  const Vec k0 = half(a.k, a.Hkv, 0), k1 = half(a.k, a.Hkv, 1), v0 = half(a.v, a.Hkv, 0),
            v1 = half(a.v, a.Hkv, 1);
  const size_t nq = a.q.size(), nl = static_cast<size_t>(a.B * a.Hq * a.T);
  Vec o0(nq), l0(nl), o1(nq), l1(nl);
  k::attention_fwd_block(a.q.data(), k0.data(), v0.data(), a.B, a.T, Th, a.Hq, a.Hkv, a.hd, a.scale,
                         qpos.data(), kpos0.data(), o0.data(), l0.data());
  k::attention_fwd_block(a.q.data(), k1.data(), v1.data(), a.B, a.T, Th, a.Hq, a.Hkv, a.hd, a.scale,
                         qpos.data(), kpos1.data(), o1.data(), l1.data());
  // The merge reads the stored partial outputs.
  Vec om = stored(o0, t()), lm = l0;
  const Vec o1s = stored(o1, t());
  k::attention_lse_merge(om.data(), lm.data(), o1s.data(), l1.data(), a.B, a.T, a.Hq, a.hd);
  auto q = b.up(a.q, t()), kd0 = b.up(k0, t()), kd1 = b.up(k1, t()), vd0 = b.up(v0, t()),
       vd1 = b.up(v1, t());
  auto qp = b.up_i32(qpos), kp0 = b.up_i32(kpos0), kp1 = b.up_i32(kpos1);
  auto go0 = b.empty(nq, t()), gl0 = b.empty(nl, DType::F32), go1 = b.empty(nq, t()),
       gl1 = b.empty(nl, DType::F32);
  b.ops().attention_fwd_block(b.s(), q.raw(), kd0.raw(), vd0.raw(), a.B, a.T, Th, a.Hq, a.Hkv, a.hd,
                              a.scale, qp.as<int32_t>(), kp0.as<int32_t>(), go0.raw(), gl0.data(),
                              t());
  b.ops().attention_fwd_block(b.s(), q.raw(), kd1.raw(), vd1.raw(), a.B, a.T, Th, a.Hq, a.Hkv, a.hd,
                              a.scale, qp.as<int32_t>(), kp1.as<int32_t>(), go1.raw(), gl1.data(),
                              t());
  const Vec g_l0 = b.down(gl0);
  EXPECT_LT(rel(b.down(go0), o0), attn_tol());
  EXPECT_LT(rel(b.down(go1), o1), attn_tol());
  // Rows that see no key of a block hold -inf; compare the finite ones.
  for (size_t i = 0; i < nl; ++i) {
    EXPECT_EQ(std::isinf(g_l0[i]), std::isinf(l0[i])) << i;
    if (!std::isinf(l0[i])) {
      EXPECT_NEAR(g_l0[i], l0[i], t() == DType::F32 ? 1e-5 : 2e-2) << i;
    }
  }
  b.ops().attention_lse_merge(b.s(), go0.raw(), gl0.data(), go1.raw(), gl1.data(), a.B, a.T, a.Hq,
                              a.hd, t());
  EXPECT_LT(rel(b.down(go0), om), attn_tol());
  EXPECT_LT(rel(b.down(gl0), lm), t() == DType::F32 ? 2e-6 : 1e-3);
  // Backward of block 1 from the merged (stored) result, into accumulators
  // that already hold something.
  const Vec oms = stored(om, t());
  Vec dq(nq, 0.5f), dk(k1.size(), 0.25f), dv(v1.size(), -0.25f);
  k::attention_bwd_block(a.q.data(), k1.data(), v1.data(), oms.data(), lm.data(), a.dout.data(),
                         a.B, a.T, Th, a.Hq, a.Hkv, a.hd, a.scale, qpos.data(), kpos1.data(),
                         dq.data(), dk.data(), dv.data());
  auto mo = b.up(oms, t()), ml = b.up(lm, DType::F32), go = b.up(a.dout, t());
  auto gdq = b.up(Vec(nq, 0.5f), DType::F32), gdk = b.up(Vec(k1.size(), 0.25f), DType::F32),
       gdv = b.up(Vec(v1.size(), -0.25f), DType::F32);
  b.ops().attention_bwd_block(b.s(), q.raw(), kd1.raw(), vd1.raw(), mo.raw(), ml.data(), go.raw(),
                              a.B, a.T, Th, a.Hq, a.Hkv, a.hd, a.scale, qp.as<int32_t>(),
                              kp1.as<int32_t>(), gdq.data(), gdk.data(), gdv.data(), t());
  const double acc_tol = t() == DType::F32 ? 2e-6 : 1e-2;
  EXPECT_LT(rel(b.down(gdq), dq), acc_tol);
  EXPECT_LT(rel(b.down(gdk), dk), acc_tol);
  EXPECT_LT(rel(b.down(gdv), dv), acc_tol);
}

// The vocab-parallel cross-entropy in two shards (the tp all-reduces done
// here on the host) equals the one-shard case, which equals the reference.
TEST_P(Ops, CrossEntropyShards) {
  const int64_t rows = 10, V = 64, P = 2, Vl = V / P;
  std::vector<int32_t> tg(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    tg[static_cast<size_t>(r)] = r == 4 ? -1 : int32_t((r * 13) % V);
  Vec logits = stored(randn(static_cast<size_t>(rows * V), 20, 3.f), t());
  const size_t R = static_cast<size_t>(rows);
  Vec mx(R), se(R), tl(R), lse(R), rl(R), dl(logits.size());
  k::ce_partial(logits.data(), tg.data(), rows, V, 0, mx.data(), se.data(), tl.data());
  k::ce_finish(mx.data(), se.data(), tl.data(), tg.data(), rows, lse.data(), rl.data());
  k::ce_bwd(logits.data(), tg.data(), lse.data(), rows, V, 0, 0.125f, dl.data());
  const double loss = k::loss_sum(rl.data(), tg.data(), rows);
  auto tgd = b.up_i32(tg);
  // One shard: the whole vocabulary.
  {
    auto x = b.up(logits, t()), stats = b.empty(5 * R, DType::F32), acc = b.empty(1, DType::F64);
    float* p = stats.data();
    b.ops().ce_partial(b.s(), x.raw(), tgd.as<int32_t>(), rows, V, 0, p, p + R, p + 2 * R, t());
    b.ops().ce_finish(b.s(), p, p + R, p + 2 * R, tgd.as<int32_t>(), rows, p + 3 * R, p + 4 * R);
    acc.zero();
    b.ops().loss_accumulate(b.s(), p + 4 * R, tgd.as<int32_t>(), rows, 0.5, acc.as<double>());
    b.ops().ce_bwd(b.s(), x.raw(), tgd.as<int32_t>(), p + 3 * R, rows, V, 0, 0.125f, x.raw(), t());
    const Vec all = b.down(stats);
    EXPECT_LT(rel(Vec(all.begin() + 3 * R, all.begin() + 4 * R), lse), 1e-6);
    EXPECT_NEAR(b.down_f64(acc)[0], 0.5 * loss, 1e-5 * loss);
    EXPECT_LT(rel(b.down(x), dl), tol());
  }
  // Two shards.
  std::vector<Vec> mxs(P), ses(P), tls(P);
  std::vector<st::Tensor> xs;
  Vec gmax(R, -1e30f);
  for (int64_t p = 0; p < P; ++p) {
    Vec part;
    for (int64_t r = 0; r < rows; ++r)
      part.insert(part.end(), logits.begin() + r * V + p * Vl,
                  logits.begin() + r * V + (p + 1) * Vl);
    xs.push_back(b.up(part, t()));
    auto stats = b.empty(3 * R, DType::F32);
    float* q = stats.data();
    b.ops().ce_partial(b.s(), xs.back().raw(), tgd.as<int32_t>(), rows, Vl, p * Vl, q, q + R,
                       q + 2 * R, t());
    const Vec h = b.down(stats);
    mxs[static_cast<size_t>(p)].assign(h.begin(), h.begin() + R);
    ses[static_cast<size_t>(p)].assign(h.begin() + R, h.begin() + 2 * R);
    tls[static_cast<size_t>(p)].assign(h.begin() + 2 * R, h.end());
    for (size_t r = 0; r < R; ++r) gmax[r] = std::max(gmax[r], mxs[static_cast<size_t>(p)][r]);
  }
  Vec se_sum(R, 0.f), tl_sum(R, 0.f);
  for (int64_t p = 0; p < P; ++p) {
    auto m = b.up(mxs[static_cast<size_t>(p)], DType::F32), g = b.up(gmax, DType::F32),
         s = b.up(ses[static_cast<size_t>(p)], DType::F32);
    b.ops().ce_rescale(b.s(), m.data(), g.data(), s.data(), rows);
    const Vec sh = b.down(s);
    for (size_t r = 0; r < R; ++r) se_sum[r] += sh[r], tl_sum[r] += tls[static_cast<size_t>(p)][r];
  }
  auto g = b.up(gmax, DType::F32), s = b.up(se_sum, DType::F32), tt = b.up(tl_sum, DType::F32);
  auto l2 = b.empty(R, DType::F32), r2 = b.empty(R, DType::F32);
  b.ops().ce_finish(b.s(), g.data(), s.data(), tt.data(), tgd.as<int32_t>(), rows, l2.data(),
                    r2.data());
  EXPECT_LT(rel(b.down(l2), lse), 1e-6);
  Vec dl2(logits.size());
  for (int64_t p = 0; p < P; ++p) {
    b.ops().ce_bwd(b.s(), xs[static_cast<size_t>(p)].raw(), tgd.as<int32_t>(), l2.data(), rows, Vl,
                   p * Vl, 0.125f, xs[static_cast<size_t>(p)].raw(), t());
    const Vec h = b.down(xs[static_cast<size_t>(p)]);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(h.begin() + r * Vl, h.begin() + (r + 1) * Vl, dl2.begin() + r * V + p * Vl);
  }
  EXPECT_LT(rel(dl2, dl), tol());
}

TEST_P(Ops, SumSquaresAndAdamw) {
  const Vec g0 = randn(5000, 21), g1 = randn(37, 22);
  auto a = b.up(g0, DType::F32), c = b.up(g1, DType::F32), out = b.empty(2, DType::F64);
  b.ops().sumsq(b.s(), {{a.data(), 5000, 1}, {c.data(), 37, 0}, {a.data(), 10, 1}}, 2,
                out.as<double>());
  double s0 = 0, s1 = 0;
  for (float x : g0) s1 += double(x) * x;
  for (int i = 0; i < 10; ++i)
    s1 += double(g0[static_cast<size_t>(i)]) * g0[static_cast<size_t>(i)];
  for (float x : g1) s0 += double(x) * x;
  const auto sq = b.down_f64(out);
  EXPECT_NEAR(sq[0], s0, 1e-6 * s0);
  EXPECT_NEAR(sq[1], s1, 1e-6 * s1);
  // AdamW: three steps, one span with decay and a compute copy, one without.
  const int64_t n = 300;
  Vec w = randn(static_cast<size_t>(n), 23), m(static_cast<size_t>(n), 0.f),
      v(static_cast<size_t>(n), 0.f), w2 = w, m2 = m, v2 = v;
  auto wd = b.up(w, DType::F32), md = b.up(m, DType::F32), vd = b.up(v, DType::F32);
  auto wd2 = b.up(w2, DType::F32), md2 = b.up(m2, DType::F32), vd2 = b.up(v2, DType::F32);
  auto wc = b.empty(static_cast<size_t>(n), t());
  for (int step = 1; step <= 3; ++step) {
    const Vec g = randn(static_cast<size_t>(n), uint32_t(30 + step));
    k::adamw_step(w.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                  0.5f);
    k::adamw_step(w2.data(), g.data(), m2.data(), v2.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.f,
                  step, 0.5f);
    auto gd = b.up(g, DType::F32);
    st::AdamWHyper h;
    h.lr = 1e-2f, h.beta1 = 0.9f, h.beta2 = 0.95f, h.eps = 1e-8f, h.weight_decay = 0.1f;
    h.step = step, h.grad_scale = 0.5f;
    b.ops().adamw(b.s(),
                  {f32_span(wd.data(), gd.data(), md.data(), vd.data(), wc.raw(), t(), n, true),
                   f32_span(wd2.data(), gd.data(), md2.data(), vd2.data(), nullptr, t(), n, false)},
                  h);
    b.s().synchronize();  // `gd` goes out of scope
  }
  const double at = on_cuda() ? 1e-6 : 0;  // one formula; CUDA may fuse differently
  EXPECT_LE(rel(b.down(wd), w), at);
  EXPECT_LE(rel(b.down(md), m), at);
  EXPECT_LE(rel(b.down(vd), v), at);
  EXPECT_LE(rel(b.down(wd2), w2), at);
  EXPECT_EQ(b.down(wc), stored(w, t()));
}

// bf16 state (optim.state_dtype=bf16): weights and moments stored with
// stochastic rounding, against the CPU kernel on the same bits. The random
// bits are the same function on every backend, so a value rounds differently
// only where the fp32 math differs in its last bits right at a rounding
// threshold: at most one bf16 ulp (2^-7 relative) of a few elements.
TEST_P(Ops, AdamwBf16State) {
  if (t() != DType::BF16) GTEST_SKIP() << "bf16 state goes with bf16 compute";
  const int64_t n = 70000;  // more than one CUDA chunk (65536)
  auto bits = [](const Vec& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = st::f32_to_bf16(x[i]);
    return h;
  };
  std::vector<uint16_t> w = bits(randn(size_t(n), 41)), m(size_t(n), 0), v(size_t(n), 0);
  auto wd = b.up(stored(randn(size_t(n), 41), DType::BF16), DType::BF16);
  auto md = b.empty(size_t(n), DType::BF16), vd = b.empty(size_t(n), DType::BF16);
  md.zero();
  vd.zero();
  for (int step = 1; step <= 3; ++step) {
    const Vec g = randn(size_t(n), uint32_t(50 + step));
    const uint32_t seed = 977u * uint32_t(step);
    k::adamw_step_bf16(w.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                       step, 0.5f, seed, 12345u, 1000);
    auto gd = b.up(g, DType::F32);
    st::AdamWHyper h;
    h.lr = 1e-2f, h.beta1 = 0.9f, h.beta2 = 0.95f, h.eps = 1e-8f, h.weight_decay = 0.1f;
    h.step = step, h.grad_scale = 0.5f, h.rng_seed = seed;
    st::AdamWSpan sp;
    sp.w = wd.raw(), sp.g = gd.data(), sp.m = md.raw(), sp.v = vd.raw();
    sp.state_t = DType::BF16, sp.wc = nullptr, sp.n = n, sp.decay = true;
    sp.rng_key = 12345u, sp.rng_pos = 1000;
    b.ops().adamw(b.s(), {sp}, h);
    b.s().synchronize();
  }
  auto widen = [](const std::vector<uint16_t>& h) {
    Vec x(h.size());
    for (size_t i = 0; i < h.size(); ++i) x[i] = st::bf16_to_f32(h[i]);
    return x;
  };
  const double at = on_cuda() ? 8e-3 : 0;
  EXPECT_LE(rel(b.down(wd), widen(w)), at);
  EXPECT_LE(rel(b.down(md), widen(m)), at);
  EXPECT_LE(rel(b.down(vd), widen(v)), at);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Ops, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& i) { return std::string(st::dtype_name(i.param)); });
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string name = backend_name();
  st::Config cfg;
  cfg.runtime.device = name == "cuda" ? "cuda" : "cpu";
  cfg.runtime.strict_device = name == "cpu-strict";
  cfg.train.precision = "bf16";
  try {
    g_be = &st::backend_for(cfg);
    const std::string why = g_be->preflight(cfg, 0, 1);
    if (!why.empty()) {
      std::printf("skipped: backend '%s' cannot run here: %s\n", name.c_str(), why.c_str());
      return 77;
    }
  } catch (const st::UsageError& e) {
    std::printf("skipped: backend '%s' is not available: %s\n", name.c_str(), e.what());
    return 77;
  }
  std::printf("backend: %s (%s)\n", g_be->name().c_str(), g_be->ops().describe().c_str());
  return RUN_ALL_TESTS();
}
