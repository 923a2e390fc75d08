// One transformer block, forward and backward, on the CPU kernels, and the
// layer-range drivers with activation checkpointing (none/selective/full).
// Under tensor parallelism the q/k/v and w1/w3 GEMMs are column-parallel
// (local heads / ffn columns) and wo, w2 row-parallel (partial sums reduced
// over tp by reduce_rows); under sequence parallelism the norms run on this
// rank's rows and gather_rows all-gathers their output before the GEMMs.
// Recomputation calls the same deterministic kernels (and collectives) on
// the same inputs, so every mode gives bitwise the same loss and gradients.
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

// Norm of the residual-stream rows [Ns, d]; rstd kept, the output returned.
Tensor norm_fwd(const Tensor& x, const Param* p, const Dims& D, float eps, Tensor& rstd) {
  rstd = Tensor({D.Ns}, kAct);
  Tensor y = act(D.Ns, D.d);
  k::rmsnorm_fwd(x.data(), p->w.data(), D.Ns, D.d, eps, y.data(), rstd.data());
  return y;
}
}  // namespace

void drop_activations(BlockActs& a, ActCkpt mode) {
  if (mode == ActCkpt::None) return;
  // Selective and Full both recompute these cheap, non-GEMM results.
  for (Tensor* t : {&a.rstd1, &a.xn1, &a.att, &a.lse, &a.rstd2, &a.xn2, &a.a}) *t = Tensor();
  if (mode == ActCkpt::Full)
    for (Tensor* t : {&a.q, &a.k, &a.v, &a.h2, &a.g, &a.u}) *t = Tensor();
}

// GEMM rows [N, d] of a norm output on the residual rows [Ns, d].
#define ST_GEMM_ROWS(y) (sp ? gather_rows(y, D) : std::move(y))

Tensor Model::Impl::block_forward(int l, const Dims& D, BlockActs& a, bool want_output) {
  const LayerParams& P = layers[size_t(l)];
  const float eps = float(cfg.norm_eps);
  // Attention half.
  Tensor y = norm_fwd(a.x, P.attn_norm, D, eps, a.rstd1);
  a.xn1 = ST_GEMM_ROWS(y);
  a.q = act(D.N, D.Hq * D.hd);
  a.k = act(D.N, D.Hkv * D.hd);
  a.v = act(D.N, D.Hkv * D.hd);
  linear_fwd(a.xn1.data(), P.wq, D.N, a.q.data());
  linear_fwd(a.xn1.data(), P.wk, D.N, a.k.data());
  linear_fwd(a.xn1.data(), P.wv, D.N, a.v.data());
  k::rope_fwd(a.q.data(), D.B, D.T, D.Hq, D.hd, rope_cos.data(), rope_sin.data());
  k::rope_fwd(a.k.data(), D.B, D.T, D.Hkv, D.hd, rope_cos.data(), rope_sin.data());
  attention_forward(D, a);
  a.h2 = a.x.clone(kAct);
  if (tp == 1) {
    k::gemm(false, true, D.N, D.d, D.Hq * D.hd, 1.f, a.att.data(), P.wo->w.data(), 1.f,
            a.h2.data());
  } else {
    Tensor part = act(D.N, D.d);
    linear_fwd(a.att.data(), P.wo, D.N, part.data());
    part = reduce_rows(std::move(part), D);
    k::add_inplace(a.h2.data(), part.data(), part.numel());
  }
  // MLP half.
  y = norm_fwd(a.h2, P.ffn_norm, D, eps, a.rstd2);
  a.xn2 = ST_GEMM_ROWS(y);
  a.g = act(D.N, D.F);
  a.u = act(D.N, D.F);
  linear_fwd(a.xn2.data(), P.w1, D.N, a.g.data());
  linear_fwd(a.xn2.data(), P.w3, D.N, a.u.data());
  a.a = act(D.N, D.F);
  k::swiglu_fwd(a.g.data(), a.u.data(), D.N * D.F, a.a.data());
  if (!want_output) return Tensor();
  Tensor out = a.h2.clone(kAct);
  if (tp == 1) {
    k::gemm(false, true, D.N, D.d, D.F, 1.f, a.a.data(), P.w2->w.data(), 1.f, out.data());
  } else {
    Tensor part = act(D.N, D.d);
    linear_fwd(a.a.data(), P.w2, D.N, part.data());
    part = reduce_rows(std::move(part), D);
    k::add_inplace(out.data(), part.data(), part.numel());
  }
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
  Tensor y = norm_fwd(a.x, P.attn_norm, D, eps, a.rstd1);
  a.xn1 = ST_GEMM_ROWS(y);
  attention_forward(D, a);
  y = norm_fwd(a.h2, P.ffn_norm, D, eps, a.rstd2);
  a.xn2 = ST_GEMM_ROWS(y);
  a.a = act(D.N, D.F);
  k::swiglu_fwd(a.g.data(), a.u.data(), D.N * D.F, a.a.data());
}
#undef ST_GEMM_ROWS

void Model::Impl::block_backward(int l, const Dims& D, BlockActs& a, Tensor& dh) {
  const LayerParams& P = layers[size_t(l)];
  const int64_t qd = D.Hq * D.hd, kd = D.Hkv * D.hd;
  // d/d(norm input) from d/d(norm output) on the residual rows; under sp the
  // weight gradient of the local rows is summed over tp first.
  auto norm_bwd = [&](const Tensor& x, Param* p, const Tensor& rstd, const Tensor& dxn) {
    if (sp) {
      Tensor dw({D.d}, kAct);
      k::rmsnorm_bwd(x.data(), p->w.data(), rstd.data(), dxn.data(), D.Ns, D.d, dh.data(),
                     dw.data(), /*accumulate=*/true);
      add_norm_grad(p, dw);
    } else {
      k::rmsnorm_bwd(x.data(), p->w.data(), rstd.data(), dxn.data(), D.Ns, D.d, dh.data(),
                     p->g.data(), /*accumulate=*/true);
    }
  };
  // dh holds d/d(h3), h3 = h2 + a w2^T; under sp the GEMMs need all rows.
  Tensor dhf = sp ? gather_rows(dh, D) : Tensor();
  const float* dy = sp ? dhf.data() : dh.data();
  linear_bwd_w(dy, a.a.data(), P.w2, D.N);
  a.a = Tensor();
  Tensor da = act(D.N, D.F);
  linear_bwd_x(dy, P.w2, D.N, da.data(), 0.f);
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
  Tensor dxl = reduce_rows(std::move(dxn), D);
  norm_bwd(a.h2, P.ffn_norm, a.rstd2, dxl);
  a.h2 = Tensor();
  a.rstd2 = Tensor();
  // dh now holds d/d(h2), h2 = x + att wo^T.
  if (sp) dhf = gather_rows(dh, D);
  dy = sp ? dhf.data() : dh.data();
  linear_bwd_w(dy, a.att.data(), P.wo, D.N);
  Tensor datt = act(D.N, qd);
  linear_bwd_x(dy, P.wo, D.N, datt.data(), 0.f);
  dhf = Tensor();
  Tensor dq = act(D.N, qd), dk = act(D.N, kd), dv = act(D.N, kd);
  attention_backward(D, a, datt.data(), dq.data(), dk.data(), dv.data());
  datt = Tensor();
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.att, &a.lse}) *t = Tensor();
  k::rope_bwd(dq.data(), D.B, D.T, D.Hq, D.hd, rope_cos.data(), rope_sin.data());
  k::rope_bwd(dk.data(), D.B, D.T, D.Hkv, D.hd, rope_cos.data(), rope_sin.data());
  linear_bwd_w(dq.data(), a.xn1.data(), P.wq, D.N);
  linear_bwd_w(dk.data(), a.xn1.data(), P.wk, D.N);
  linear_bwd_w(dv.data(), a.xn1.data(), P.wv, D.N);
  a.xn1 = Tensor();
  dxn = act(D.N, D.d);
  linear_bwd_x(dq.data(), P.wq, D.N, dxn.data(), 0.f);
  linear_bwd_x(dk.data(), P.wk, D.N, dxn.data(), 1.f);
  linear_bwd_x(dv.data(), P.wv, D.N, dxn.data(), 1.f);
  dxl = reduce_rows(std::move(dxn), D);
  norm_bwd(a.x, P.attn_norm, a.rstd1, dxl);
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
    hook_before(l);
    h = block_forward(l, D, a, /*want_output=*/true);
    hook_after(l);
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
    hook_before(l);
    block_recompute(l, D, a, mode);
    block_backward(l, D, a, dh);
    const LayerParams& P = layers[size_t(l)];
    grads_ready({P.w2, P.w1, P.w3, P.ffn_norm, P.wo, P.wq, P.wk, P.wv, P.attn_norm});
    hook_after(l);
  }
}
}  // namespace st
