// One transformer block, forward and backward, on the CPU kernels, and the
// layer-range drivers with activation checkpointing (none/selective/full).
// Recomputation calls the same deterministic kernels on the same inputs, so
// every mode gives bitwise the same loss and gradients.
#include <cmath>

#include "core/error.hpp"
#include "kernels/ops.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace k = kernels;
namespace {
constexpr MemCat kAct = MemCat::Activations;

Tensor act(int64_t rows, int64_t cols) { return Tensor({rows, cols}, kAct); }

// y[N, out] = x[N, in] W^T, W: [out, in]
void linear_fwd(const float* x, const Param* p, int64_t N, float* y) {
  k::gemm(false, true, N, p->w.dim(0), p->w.dim(1), 1.f, x, p->w.data(), 0.f, y);
}
// dW += dy^T x
void linear_bwd_w(const float* dy, const float* x, Param* p, int64_t N) {
  k::gemm(true, false, p->w.dim(0), p->w.dim(1), N, 1.f, dy, x, 1.f, p->g.data());
}
// dx (= or += when beta = 1) dy W
void linear_bwd_x(const float* dy, const Param* p, int64_t N, float* dx, float beta) {
  k::gemm(false, false, N, p->w.dim(1), p->w.dim(0), 1.f, dy, p->w.data(), beta, dx);
}

void norm_fwd(const Tensor& x, const Param* p, const Dims& D, float eps, Tensor& rstd, Tensor& y) {
  rstd = Tensor({D.N}, kAct);
  y = act(D.N, D.d);
  k::rmsnorm_fwd(x.data(), p->w.data(), D.N, D.d, eps, y.data(), rstd.data());
}
}  // namespace

void drop_activations(BlockActs& a, ActCkpt mode) {
  if (mode == ActCkpt::None) return;
  // Selective and Full both recompute these cheap, non-GEMM results.
  for (Tensor* t : {&a.rstd1, &a.xn1, &a.att, &a.lse, &a.rstd2, &a.xn2, &a.a}) *t = Tensor();
  if (mode == ActCkpt::Full)
    for (Tensor* t : {&a.q, &a.k, &a.v, &a.h2, &a.g, &a.u}) *t = Tensor();
}

Tensor Model::Impl::block_forward(int l, const Dims& D, BlockActs& a, bool want_output) {
  const LayerParams& P = layers[size_t(l)];
  const float eps = float(cfg.norm_eps);
  const float scale = 1.f / std::sqrt(float(D.hd));
  // Attention half.
  norm_fwd(a.x, P.attn_norm, D, eps, a.rstd1, a.xn1);
  a.q = act(D.N, D.Hq * D.hd);
  a.k = act(D.N, D.Hkv * D.hd);
  a.v = act(D.N, D.Hkv * D.hd);
  linear_fwd(a.xn1.data(), P.wq, D.N, a.q.data());
  linear_fwd(a.xn1.data(), P.wk, D.N, a.k.data());
  linear_fwd(a.xn1.data(), P.wv, D.N, a.v.data());
  k::rope_fwd(a.q.data(), D.B, D.T, D.Hq, D.hd, rope_cos.data(), rope_sin.data());
  k::rope_fwd(a.k.data(), D.B, D.T, D.Hkv, D.hd, rope_cos.data(), rope_sin.data());
  a.att = act(D.N, D.Hq * D.hd);
  a.lse = Tensor({D.B, D.Hq, D.T}, kAct);
  k::attention_fwd(a.q.data(), a.k.data(), a.v.data(), D.B, D.T, D.Hq, D.Hkv, D.hd, scale,
                   a.att.data(), a.lse.data());
  a.h2 = a.x.clone(kAct);
  k::gemm(false, true, D.N, D.d, D.Hq * D.hd, 1.f, a.att.data(), P.wo->w.data(), 1.f, a.h2.data());
  // MLP half.
  norm_fwd(a.h2, P.ffn_norm, D, eps, a.rstd2, a.xn2);
  a.g = act(D.N, D.F);
  a.u = act(D.N, D.F);
  linear_fwd(a.xn2.data(), P.w1, D.N, a.g.data());
  linear_fwd(a.xn2.data(), P.w3, D.N, a.u.data());
  a.a = act(D.N, D.F);
  k::swiglu_fwd(a.g.data(), a.u.data(), D.N * D.F, a.a.data());
  if (!want_output) return Tensor();
  Tensor out = a.h2.clone(kAct);
  k::gemm(false, true, D.N, D.d, D.F, 1.f, a.a.data(), P.w2->w.data(), 1.f, out.data());
  return out;
}

void Model::Impl::block_recompute(int l, const Dims& D, BlockActs& a, ActCkpt mode) {
  if (mode == ActCkpt::None) return;
  if (mode == ActCkpt::Full) {
    block_forward(l, D, a, /*want_output=*/false);
    return;
  }
  const LayerParams& P = layers[size_t(l)];
  const float eps = float(cfg.norm_eps);
  norm_fwd(a.x, P.attn_norm, D, eps, a.rstd1, a.xn1);
  a.att = act(D.N, D.Hq * D.hd);
  a.lse = Tensor({D.B, D.Hq, D.T}, kAct);
  k::attention_fwd(a.q.data(), a.k.data(), a.v.data(), D.B, D.T, D.Hq, D.Hkv, D.hd,
                   1.f / std::sqrt(float(D.hd)), a.att.data(), a.lse.data());
  norm_fwd(a.h2, P.ffn_norm, D, eps, a.rstd2, a.xn2);
  a.a = act(D.N, D.F);
  k::swiglu_fwd(a.g.data(), a.u.data(), D.N * D.F, a.a.data());
}

void Model::Impl::block_backward(int l, const Dims& D, BlockActs& a, Tensor& dh) {
  const LayerParams& P = layers[size_t(l)];
  const int64_t qd = D.Hq * D.hd, kd = D.Hkv * D.hd;
  // dh holds d/d(h3), h3 = h2 + a w2^T.
  linear_bwd_w(dh.data(), a.a.data(), P.w2, D.N);
  a.a = Tensor();
  Tensor da = act(D.N, D.F);
  linear_bwd_x(dh.data(), P.w2, D.N, da.data(), 0.f);
  // In place: g, u become dg, du.
  k::swiglu_bwd(a.g.data(), a.u.data(), da.data(), D.N * D.F, a.g.data(), a.u.data());
  da = Tensor();
  linear_bwd_w(a.g.data(), a.xn2.data(), P.w1, D.N);
  linear_bwd_w(a.u.data(), a.xn2.data(), P.w3, D.N);
  a.xn2 = Tensor();
  Tensor dxn = act(D.N, D.d);
  linear_bwd_x(a.g.data(), P.w1, D.N, dxn.data(), 0.f);
  linear_bwd_x(a.u.data(), P.w3, D.N, dxn.data(), 1.f);
  a.g = Tensor();
  a.u = Tensor();
  k::rmsnorm_bwd(a.h2.data(), P.ffn_norm->w.data(), a.rstd2.data(), dxn.data(), D.N, D.d, dh.data(),
                 P.ffn_norm->g.data(), /*accumulate=*/true);
  a.h2 = Tensor();
  a.rstd2 = Tensor();
  // dh now holds d/d(h2), h2 = x + att wo^T.
  linear_bwd_w(dh.data(), a.att.data(), P.wo, D.N);
  Tensor datt = act(D.N, qd);
  linear_bwd_x(dh.data(), P.wo, D.N, datt.data(), 0.f);
  Tensor dq = act(D.N, qd), dk = act(D.N, kd), dv = act(D.N, kd);
  k::attention_bwd(a.q.data(), a.k.data(), a.v.data(), a.att.data(), a.lse.data(), datt.data(), D.B,
                   D.T, D.Hq, D.Hkv, D.hd, 1.f / std::sqrt(float(D.hd)), dq.data(), dk.data(),
                   dv.data());
  datt = Tensor();
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.att, &a.lse}) *t = Tensor();
  k::rope_bwd(dq.data(), D.B, D.T, D.Hq, D.hd, rope_cos.data(), rope_sin.data());
  k::rope_bwd(dk.data(), D.B, D.T, D.Hkv, D.hd, rope_cos.data(), rope_sin.data());
  linear_bwd_w(dq.data(), a.xn1.data(), P.wq, D.N);
  linear_bwd_w(dk.data(), a.xn1.data(), P.wk, D.N);
  linear_bwd_w(dv.data(), a.xn1.data(), P.wv, D.N);
  a.xn1 = Tensor();
  linear_bwd_x(dq.data(), P.wq, D.N, dxn.data(), 0.f);
  linear_bwd_x(dk.data(), P.wk, D.N, dxn.data(), 1.f);
  linear_bwd_x(dv.data(), P.wv, D.N, dxn.data(), 1.f);
  k::rmsnorm_bwd(a.x.data(), P.attn_norm->w.data(), a.rstd1.data(), dxn.data(), D.N, D.d, dh.data(),
                 P.attn_norm->g.data(), /*accumulate=*/true);
  a = BlockActs();
}

Tensor Model::Impl::layers_forward(int l0, int l1, const Dims& D, Tensor h,
                                   std::vector<BlockActs>* acts, ActCkpt mode) {
  if (acts) {
    ST_CHECK(acts->size() == size_t(l1 - l0), "activation slots ", acts->size(), " for layers [",
             l0, ", ", l1, ")");
  }
  for (int l = l0; l < l1; ++l) {
    BlockActs scratch;
    BlockActs& a = acts ? (*acts)[size_t(l - l0)] : scratch;
    a.x = std::move(h);
    h = block_forward(l, D, a, /*want_output=*/true);
    if (acts) {
      drop_activations(a, mode);
    } else {
      a = BlockActs();
    }
  }
  return h;
}

void Model::Impl::layers_backward(int l0, int l1, const Dims& D, std::vector<BlockActs>& acts,
                                  Tensor& dh, ActCkpt mode) {
  for (int l = l1 - 1; l >= l0; --l) {
    BlockActs& a = acts[size_t(l - l0)];
    block_recompute(l, D, a, mode);
    block_backward(l, D, a, dh);
  }
}
}  // namespace st
