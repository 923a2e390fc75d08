// The pipeline-stage API (stage_forward / stage_backward with several
// micro-batches in flight), the first stage's vocab-parallel embedding, the
// last stage's final norm, vocab-parallel LM head and cross-entropy (tp = 1
// is its one-shard case), and the tensor-parallel plumbing (gather / reduce
// of the residual stream rows, norm-weight gradient reduction under
// sequence parallelism). Collectives are enqueued after the compute stream
// and the compute stream waits for them.
#include <cmath>
#include <cstring>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "model/model_impl.hpp"

namespace st {

void Model::Impl::grads_ready(std::initializer_list<const Param*> ps) {
  if (!hooks.grad_ready) return;
  for (const Param* p : ps) hooks.grad_ready(int(p - params.data()));
}

Tensor Model::Impl::gather_rows(const Tensor& x, const Dims& D) {
  Tensor out = act(D.N, D.d);
  if (!sp) {
    dev->copy(out.raw(), x.raw(), x.bytes(), cs());
    return out;
  }
  par.tp->all_gather(x.raw(), out.raw(), equal_counts(tp, D.Ns * D.d), cdt, cs()).wait(cs());
  return out;
}

Tensor Model::Impl::reduce_rows(Tensor partial, const Dims& D) {
  if (tp == 1) return partial;
  if (!sp) {
    par.tp->all_reduce_on(cs(), partial.raw(), D.N * D.d, cdt);
    return partial;
  }
  Tensor out = act(D.Ns, D.d);
  par.tp->reduce_scatter(partial.raw(), out.raw(), equal_counts(tp, D.Ns * D.d), cdt, cs())
      .wait(cs());
  return out;
}

void Model::Impl::add_norm_grad(Param* p, Tensor& dw_local) {
  if (sp) par.tp->all_reduce_on(cs(), dw_local.raw(), dw_local.numel(), DType::F32);
  ops->add(cs(), p->g.raw(), dw_local.raw(), dw_local.numel(), DType::F32);
}

Tensor Model::Impl::embed_forward(const Dims& D, const Tensor& tok) {
  Tensor h = act(D.N, D.d);
  ops->embedding_fwd(cs(), tok.as<int32_t>(), D.N, tok_emb->w.raw(), D.v0, D.V, D.d, h.raw(), cdt);
  return reduce_rows(std::move(h), D);
}

void Model::Impl::embed_backward(const Dims& D, const Tensor& tok, const Tensor& dh) {
  if (sp) {
    Tensor full = gather_rows(dh, D);
    ops->embedding_bwd(cs(), tok.as<int32_t>(), D.N, full.raw(), D.v0, D.V, D.d,
                       tok_emb->g.data(), cdt);
  } else {
    ops->embedding_bwd(cs(), tok.as<int32_t>(), D.N, dh.raw(), D.v0, D.V, D.d, tok_emb->g.data(),
                       cdt);
  }
}

void Model::Impl::head_forward(MicroState& ms, Tensor h, bool keep) {
  const Dims& D = ms.D;
  Stream& s = cs();
  const int32_t* tg = ms.targets.as<int32_t>();
  Tensor rstd = f32({D.Ns}), xnl = act(D.Ns, D.d);
  ops->rmsnorm_fwd(s, h.raw(), norm->w.raw(), D.Ns, D.d, float(cfg.norm_eps), xnl.raw(),
                   rstd.data(), cdt);
  Tensor xn = sp ? gather_rows(xnl, D) : std::move(xnl);
  xnl = Tensor();
  Tensor logits = act(D.N, D.V);
  ops->gemm(s, false, true, D.N, D.V, D.d, 1.f, xn.raw(), D.d, output->w.raw(), D.d, cdt, 0.f,
            logits.raw(), D.V, cdt);
  // Row statistics: [max | sumexp | target logit | global max | row loss].
  Tensor st = f32({5, D.N});
  float* mx = st.data();
  float *se = mx + D.N, *tl = se + D.N, *gmax = tl + D.N, *row_loss = gmax + D.N;
  ops->ce_partial(s, logits.raw(), tg, D.N, D.V, D.v0, mx, se, tl, cdt);
  if (tp > 1) {
    dev->copy(gmax, mx, size_t(D.N) * sizeof(float), s);
    par.tp->all_reduce_on(s, gmax, D.N, DType::F32, ReduceOp::Max);
    ops->ce_rescale(s, mx, gmax, se, D.N);
    par.tp->all_reduce_on(s, se, 2 * D.N, DType::F32);  // sumexp and target logit
  } else {
    gmax = mx;
  }
  Tensor lse = f32({D.N});
  ops->ce_finish(s, gmax, se, tl, tg, D.N, lse.data(), row_loss);
  if (ms.n_valid > 0)
    ops->loss_accumulate(s, row_loss, tg, D.N, 1.0 / double(ms.n_valid), loss_acc.as<double>());
  if (keep) {
    ms.hL = std::move(h);
    ms.rstd = std::move(rstd);
    ms.xn = std::move(xn);
    ms.logits = std::move(logits);
    ms.lse = std::move(lse);
  }
}

Tensor Model::Impl::head_backward(MicroState& ms, float grad_scale) {
  const Dims& D = ms.D;
  Stream& s = cs();
  // Everything is scaled by grad_scale at the source, so parameter grads
  // accumulate directly. The logits become dlogits in place.
  const float scale = ms.n_valid > 0 ? grad_scale / float(ms.n_valid) : 0.f;
  ops->ce_bwd(s, ms.logits.raw(), ms.targets.as<int32_t>(), ms.lse.data(), D.N, D.V, D.v0, scale,
              ms.logits.raw(), cdt);
  ms.lse = Tensor();
  ops->gemm(s, true, false, D.V, D.d, D.N, 1.f, ms.logits.raw(), D.V, ms.xn.raw(), D.d, cdt, 1.f,
            output->g.raw(), D.d, DType::F32);
  Tensor dxn = act(D.N, D.d);
  ops->gemm(s, false, false, D.N, D.d, D.V, 1.f, ms.logits.raw(), D.V, output->w.raw(), D.d, cdt,
            0.f, dxn.raw(), D.d, cdt);
  ms.logits = Tensor();
  ms.xn = Tensor();
  dxn = reduce_rows(std::move(dxn), D);
  Tensor dh = act(D.Ns, D.d);
  if (sp) {
    Tensor dw = f32({D.d});
    dw.zero();
    ops->rmsnorm_bwd(s, ms.hL.raw(), norm->w.raw(), ms.rstd.data(), dxn.raw(), D.Ns, D.d, dh.raw(),
                     dw.data(), /*accumulate=*/false, cdt);
    add_norm_grad(norm, dw);
  } else {
    ops->rmsnorm_bwd(s, ms.hL.raw(), norm->w.raw(), ms.rstd.data(), dxn.raw(), D.Ns, D.d, dh.raw(),
                     norm->g.data(), /*accumulate=*/false, cdt);
  }
  ms.hL = Tensor();
  ms.rstd = Tensor();
  grads_ready({output, norm});
  return dh;
}

void Model::Impl::forward(MicroState& ms, const int32_t* tokens, const Tensor* x_in,
                          const int32_t* targets, bool keep, Tensor* x_out) {
  const Dims& D = ms.D;
  // This cp rank's rows of a full [B, Tg] token array.
  auto local_rows = [&](const int32_t* full) {
    const std::vector<int32_t>& p = pos[size_t(cp_rank)];
    std::vector<int32_t> out(size_t(D.N));
    for (int64_t b = 0; b < D.B; ++b)
      for (int64_t t = 0; t < D.T; ++t) out[size_t(b * D.T + t)] = full[b * D.Tg + p[size_t(t)]];
    return out;
  };
  Tensor h;
  if (par.has_embedding) {
    ST_USAGE_CHECK(tokens != nullptr, "model: the first pipeline stage needs tokens");
    const std::vector<int32_t> tok = local_rows(tokens);
    for (size_t r = 0; r < tok.size(); ++r)
      ST_CHECK(tok[r] >= 0 && tok[r] < cfg.vocab_size, "token ", tok[r], " at local row ", r,
               " is outside the vocabulary [0, ", cfg.vocab_size, ")");
    ms.tokens = upload_i32(tok);
    hook_before(-1);
    h = embed_forward(D, ms.tokens);
    hook_after(-1);
  } else {
    ST_USAGE_CHECK(x_in != nullptr && x_in->numel() == D.Ns * D.d,
                   "model: a pipeline stage without the embedding needs x_in of ", D.Ns * D.d,
                   " elements");
    h = act(D.Ns, D.d);
    dev->copy(h.raw(), x_in->raw(), h.bytes(), cs());
  }
  if (keep) ms.acts.resize(size_t(l1 - l0));
  h = layers_forward(l0, l1, D, std::move(h), keep ? &ms.acts : nullptr, ms.mode);
  if (!par.has_head) {
    ST_USAGE_CHECK(x_out != nullptr, "model: a pipeline stage without the head needs x_out");
    *x_out = std::move(h);
    return;
  }
  ST_USAGE_CHECK(targets != nullptr, "model: the last pipeline stage needs targets");
  const std::vector<int32_t> tgt = local_rows(targets);
  for (size_t r = 0; r < tgt.size(); ++r)
    ST_CHECK(tgt[r] < cfg.vocab_size, "target ", tgt[r], " at local row ", r,
             " is outside the vocabulary [0, ", cfg.vocab_size, ")");
  // Valid targets of the whole micro-batch: every cp rank holds the full array.
  ms.n_valid = 0;
  for (int64_t i = 0; i < D.B * D.Tg; ++i) ms.n_valid += targets[i] >= 0;
  ms.targets = upload_i32(tgt);
  hook_before(cfg.n_layers);
  head_forward(ms, std::move(h), keep);
  hook_after(cfg.n_layers);
}

int Model::in_flight() const { return int(impl_->micros.size()); }

int64_t Model::boundary_elems(int B, int T) const {
  return impl_->dims(B, T).Ns * impl_->cfg.d_model;
}

void Model::stage_forward(int micro, const int32_t* tokens, const Tensor* x_in,
                          const int32_t* targets, int B, int T, ActCkpt mode, Tensor* x_out) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  ST_USAGE_CHECK(m.micros.count(micro) == 0, "model: micro-batch ", micro,
                 " is already in flight (forwarded, not yet backwarded)");
  MicroState ms;
  ms.D = m.dims(B, T);
  ms.mode = mode;
  m.ensure_rope(T);
  m.span_begin(true);
  m.forward(ms, tokens, x_in, targets, /*keep=*/true, x_out);
  m.span_end();
  m.micros.emplace(micro, std::move(ms));
}

void Model::stage_backward(int micro, const Tensor* dy, float grad_scale, Tensor* dx_in) {
  Impl& m = *impl_;
  auto it = m.micros.find(micro);
  ST_USAGE_CHECK(it != m.micros.end(), "model: stage_backward of micro-batch ", micro,
                 " that is not in flight");
  MicroState ms = std::move(it->second);
  m.micros.erase(it);
  const Dims& D = ms.D;
  m.ensure_rope(D.Tg);
  m.span_begin(false);
  Tensor dh;
  if (m.par.has_head) {
    m.hook_before(m.cfg.n_layers);
    dh = m.head_backward(ms, grad_scale);
    m.hook_after(m.cfg.n_layers);
  } else {
    ST_USAGE_CHECK(dy != nullptr && dy->numel() == D.Ns * D.d,
                   "model: a pipeline stage without the head needs dy of ", D.Ns * D.d,
                   " elements");
    dh = m.act(D.Ns, D.d);
    m.dev->copy(dh.raw(), dy->raw(), dh.bytes(), m.cs());
  }
  m.layers_backward(m.l0, m.l1, D, ms.acts, dh, ms.mode);
  if (m.par.has_embedding) {
    m.hook_before(-1);
    m.embed_backward(D, ms.tokens, dh);
    m.grads_ready({m.tok_emb});
    m.hook_after(-1);
  } else {
    ST_USAGE_CHECK(dx_in != nullptr, "model: a pipeline stage without the embedding needs dx_in");
    *dx_in = std::move(dh);
  }
  m.span_end();
}
}  // namespace st
