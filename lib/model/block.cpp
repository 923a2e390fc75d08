// One transformer block, forward and backward, on the backend's Ops, and the
// layer-range drivers with activation checkpointing (none/selective/full).
// Under tensor parallelism the q/k/v and w1/w3 GEMMs are column-parallel
// (local heads / ffn columns) and wo, w2 row-parallel (partial sums reduced
// over tp by reduce_rows); under sequence parallelism the norms run on this
// rank's rows and gather_rows all-gathers their output before the GEMMs.
// Recomputation calls the same deterministic forward kernels (and
// collectives) on the same inputs, so every mode gives bitwise the same loss
// and gradients (up to the one non-deterministic backward kernels/ops.hpp
// names, cuDNN's attention dQ on GPUs).
#include <cmath>

#include "core/error.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace {
// y[N, out] = x[N, in] W^T (+ y when beta = 1), W: [out, in]
void linear_fwd(Ops& o, Stream& s, const void* x, const Param* p, int64_t N, float beta, void* y,
                DType t) {
  const int64_t out = p->w.dim(0), in = p->w.dim(1);
  o.gemm(s, false, true, N, out, in, 1.f, x, in, p->w.raw(), in, t, beta, y, out, t);
}
// dW += dy^T x  (fp32 gradient)
void linear_bwd_w(Ops& o, Stream& s, const void* dy, const void* x, Param* p, int64_t N, DType t) {
  const int64_t out = p->w.dim(0), in = p->w.dim(1);
  o.gemm(s, true, false, out, in, N, 1.f, dy, out, x, in, t, 1.f, p->g.raw(), in, DType::F32);
}
// dx (= or += when beta = 1) dy W
void linear_bwd_x(Ops& o, Stream& s, const void* dy, const Param* p, int64_t N, void* dx,
                  float beta, DType t) {
  const int64_t out = p->w.dim(0), in = p->w.dim(1);
  o.gemm(s, false, false, N, in, out, 1.f, dy, out, p->w.raw(), in, t, beta, dx, in, t);
}
}  // namespace

void drop_activations(BlockActs& a, ActCkpt mode) {
  if (mode == ActCkpt::None) return;
  // Selective and Full both recompute these cheap, non-GEMM results.
  for (Tensor* t : {&a.rstd1, &a.xn1, &a.att, &a.lse, &a.rstd2, &a.xn2, &a.a}) *t = Tensor();
  if (mode == ActCkpt::Full)
    for (Tensor* t : {&a.q, &a.k, &a.v, &a.h2, &a.g, &a.u}) *t = Tensor();
}

// Norm of the residual-stream rows [Ns, d], then the GEMM rows [N, d] of its
// output (all-gathered over tp under sp); rstd kept.
#define ST_NORM_ROWS(x, p, rstd)                                                                 \
  [&] {                                                                                          \
    rstd = f32({D.Ns});                                                                          \
    Tensor y_ = act(D.Ns, D.d);                                                                  \
    ops->rmsnorm_fwd(cs(), (x).raw(), (p)->w.raw(), D.Ns, D.d, eps, y_.raw(), rstd.data(), cdt); \
    return sp ? gather_rows(y_, D) : std::move(y_);                                              \
  }()

Tensor Model::Impl::block_forward(int l, const Dims& D, BlockActs& a, bool want_output) {
  const LayerParams& P = layers[size_t(l)];
  const float eps = float(cfg.norm_eps);
  Stream& s = cs();
  // Attention half.
  a.xn1 = ST_NORM_ROWS(a.x, P.attn_norm, a.rstd1);
  a.q = act(D.N, D.Hq * D.hd);
  a.k = act(D.N, D.Hkv * D.hd);
  a.v = act(D.N, D.Hkv * D.hd);
  linear_fwd(*ops, s, a.xn1.raw(), P.wq, D.N, 0.f, a.q.raw(), cdt);
  linear_fwd(*ops, s, a.xn1.raw(), P.wk, D.N, 0.f, a.k.raw(), cdt);
  linear_fwd(*ops, s, a.xn1.raw(), P.wv, D.N, 0.f, a.v.raw(), cdt);
  ops->rope(s, a.q.raw(), D.B, D.T, D.Hq, D.hd, rope_cos.data(), rope_sin.data(), false, cdt);
  ops->rope(s, a.k.raw(), D.B, D.T, D.Hkv, D.hd, rope_cos.data(), rope_sin.data(), false, cdt);
  attention_forward(D, a);
  a.h2 = a.x.clone(MemCat::Activations);
  if (tp == 1) {
    linear_fwd(*ops, s, a.att.raw(), P.wo, D.N, 1.f, a.h2.raw(), cdt);
  } else {
    Tensor part = act(D.N, D.d);
    linear_fwd(*ops, s, a.att.raw(), P.wo, D.N, 0.f, part.raw(), cdt);
    part = reduce_rows(std::move(part), D);
    ops->add(s, a.h2.raw(), part.raw(), part.numel(), cdt);
  }
  // MLP half.
  a.xn2 = ST_NORM_ROWS(a.h2, P.ffn_norm, a.rstd2);
  a.g = act(D.N, D.F);
  a.u = act(D.N, D.F);
  linear_fwd(*ops, s, a.xn2.raw(), P.w1, D.N, 0.f, a.g.raw(), cdt);
  linear_fwd(*ops, s, a.xn2.raw(), P.w3, D.N, 0.f, a.u.raw(), cdt);
  a.a = act(D.N, D.F);
  ops->swiglu_fwd(s, a.g.raw(), a.u.raw(), D.N * D.F, a.a.raw(), cdt);
  if (!want_output) return Tensor();
  Tensor out = a.h2.clone(MemCat::Activations);
  if (tp == 1) {
    linear_fwd(*ops, s, a.a.raw(), P.w2, D.N, 1.f, out.raw(), cdt);
  } else {
    Tensor part = act(D.N, D.d);
    linear_fwd(*ops, s, a.a.raw(), P.w2, D.N, 0.f, part.raw(), cdt);
    part = reduce_rows(std::move(part), D);
    ops->add(s, out.raw(), part.raw(), part.numel(), cdt);
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
  a.xn1 = ST_NORM_ROWS(a.x, P.attn_norm, a.rstd1);
  attention_forward(D, a);
  a.xn2 = ST_NORM_ROWS(a.h2, P.ffn_norm, a.rstd2);
  a.a = act(D.N, D.F);
  ops->swiglu_fwd(cs(), a.g.raw(), a.u.raw(), D.N * D.F, a.a.raw(), cdt);
}
#undef ST_NORM_ROWS

void Model::Impl::block_backward(int l, const Dims& D, BlockActs& a, Tensor& dh) {
  const LayerParams& P = layers[size_t(l)];
  const int64_t qd = D.Hq * D.hd, kd = D.Hkv * D.hd;
  Stream& s = cs();
  // d/d(norm input) from d/d(norm output) on the residual rows, added into
  // dh; under sp the weight gradient of the local rows is summed over tp first.
  auto norm_bwd = [&](const Tensor& x, Param* p, const Tensor& rstd, const Tensor& dxn) {
    if (sp) {
      Tensor dw = f32({D.d});
      dw.zero();
      ops->rmsnorm_bwd(s, x.raw(), p->w.raw(), rstd.data(), dxn.raw(), D.Ns, D.d, dh.raw(),
                       dw.data(), /*accumulate=*/true, cdt);
      add_norm_grad(p, dw);
    } else {
      ops->rmsnorm_bwd(s, x.raw(), p->w.raw(), rstd.data(), dxn.raw(), D.Ns, D.d, dh.raw(),
                       p->g.data(), /*accumulate=*/true, cdt);
    }
  };
  // dh holds d/d(h3), h3 = h2 + a w2^T; under sp the GEMMs need all rows.
  Tensor dhf = sp ? gather_rows(dh, D) : Tensor();
  const void* dy = sp ? dhf.raw() : dh.raw();
  linear_bwd_w(*ops, s, dy, a.a.raw(), P.w2, D.N, cdt);
  a.a = Tensor();
  Tensor da = act(D.N, D.F);
  linear_bwd_x(*ops, s, dy, P.w2, D.N, da.raw(), 0.f, cdt);
  // In place: g, u become dg, du.
  ops->swiglu_bwd(s, a.g.raw(), a.u.raw(), da.raw(), D.N * D.F, a.g.raw(), a.u.raw(), cdt);
  da = Tensor();
  linear_bwd_w(*ops, s, a.g.raw(), a.xn2.raw(), P.w1, D.N, cdt);
  linear_bwd_w(*ops, s, a.u.raw(), a.xn2.raw(), P.w3, D.N, cdt);
  a.xn2 = Tensor();
  Tensor dxn = act(D.N, D.d);
  linear_bwd_x(*ops, s, a.g.raw(), P.w1, D.N, dxn.raw(), 0.f, cdt);
  linear_bwd_x(*ops, s, a.u.raw(), P.w3, D.N, dxn.raw(), 1.f, cdt);
  a.g = Tensor();
  a.u = Tensor();
  Tensor dxl = reduce_rows(std::move(dxn), D);
  norm_bwd(a.h2, P.ffn_norm, a.rstd2, dxl);
  a.h2 = Tensor();
  a.rstd2 = Tensor();
  // dh now holds d/d(h2), h2 = x + att wo^T.
  if (sp) dhf = gather_rows(dh, D);
  dy = sp ? dhf.raw() : dh.raw();
  linear_bwd_w(*ops, s, dy, a.att.raw(), P.wo, D.N, cdt);
  Tensor datt = act(D.N, qd);
  linear_bwd_x(*ops, s, dy, P.wo, D.N, datt.raw(), 0.f, cdt);
  dhf = Tensor();
  Tensor dq = act(D.N, qd), dk = act(D.N, kd), dv = act(D.N, kd);
  attention_backward(D, a, datt, dq, dk, dv);
  datt = Tensor();
  for (Tensor* t : {&a.q, &a.k, &a.v, &a.att, &a.lse}) *t = Tensor();
  ops->rope(s, dq.raw(), D.B, D.T, D.Hq, D.hd, rope_cos.data(), rope_sin.data(), true, cdt);
  ops->rope(s, dk.raw(), D.B, D.T, D.Hkv, D.hd, rope_cos.data(), rope_sin.data(), true, cdt);
  linear_bwd_w(*ops, s, dq.raw(), a.xn1.raw(), P.wq, D.N, cdt);
  linear_bwd_w(*ops, s, dk.raw(), a.xn1.raw(), P.wk, D.N, cdt);
  linear_bwd_w(*ops, s, dv.raw(), a.xn1.raw(), P.wv, D.N, cdt);
  a.xn1 = Tensor();
  dxn = act(D.N, D.d);
  linear_bwd_x(*ops, s, dq.raw(), P.wq, D.N, dxn.raw(), 0.f, cdt);
  linear_bwd_x(*ops, s, dk.raw(), P.wk, D.N, dxn.raw(), 1.f, cdt);
  linear_bwd_x(*ops, s, dv.raw(), P.wv, D.N, dxn.raw(), 1.f, cdt);
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
