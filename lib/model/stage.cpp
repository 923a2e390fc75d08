// The pipeline-stage API (stage_forward / stage_backward with several
// micro-batches in flight), the first stage's vocab-parallel embedding, the
// last stage's final norm, vocab-parallel LM head and cross-entropy (tp = 1
// is its one-shard case) fused in row chunks with their backward, and the
// tensor-parallel plumbing (gather / reduce
// of the residual stream rows, norm-weight gradient reduction under
// sequence parallelism). Collectives are enqueued after the compute stream
// and the compute stream waits for them.
#include <algorithm>
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
    ops->embedding_bwd(cs(), tok.as<int32_t>(), D.N, full.raw(), D.v0, D.V, D.d, tok_emb->g.data(),
                       cdt);
  } else {
    ops->embedding_bwd(cs(), tok.as<int32_t>(), D.N, dh.raw(), D.v0, D.V, D.d, tok_emb->g.data(),
                       cdt);
  }
}

int64_t Model::Impl::head_chunk_rows(const Dims& D) const {
  const int64_t V = std::max<int64_t>(D.V, 1);
  // A memory budget: as many rows as fit it (at least one). Each chunk's
  // dW += dlogits^T xn reads and writes the whole fp32 head gradient, so at
  // a 128K vocabulary fewer chunks save far more traffic than the logits
  // cost in memory.
  if (head_chunk_bytes > 0)
    return std::min<int64_t>(
        D.N, std::max<int64_t>(1, head_chunk_bytes / (V * int64_t(dtype_size(cdt)))));
  // About 4M logits per chunk (16 MB in fp32): big enough for GEMM efficiency
  // on either device, small next to the full [rows, vocab] matrix.
  constexpr int64_t kChunkElems = int64_t(1) << 22;
  return std::min<int64_t>(D.N, std::max<int64_t>(64, kChunkElems / V));
}

// Final norm, LM head and vocab-parallel cross-entropy over row chunks of
// the (gathered) normed rows. Per chunk: logits = xn W^T; the row statistics
// (ce_partial; across the tp group: max, rescale, sums); lse and row loss;
// when training, the chunk's logits become d(loss)/d(logits) in place and
// give dW += dlogits^T xn and dxn = dlogits W right away. The loss is the
// last op, so nothing downstream can change those gradients.
void Model::Impl::head_forward(MicroState& ms, Tensor h, bool train) {
  const Dims& D = ms.D;
  Stream& s = cs();
  const int32_t* tg = ms.targets.as<int32_t>();
  Tensor rstd = f32({D.Ns}), xnl = act(D.Ns, D.d);
  ops->rmsnorm_fwd(s, h.raw(), norm->w.raw(), D.Ns, D.d, float(cfg.norm_eps), xnl.raw(),
                   rstd.data(), cdt);
  Tensor xn = sp ? gather_rows(xnl, D) : std::move(xnl);
  xnl = Tensor();
  // Row statistics: [max | sumexp | target logit | global max | lse | row loss].
  Tensor st = f32({6, D.N});
  float* mx = st.data();
  float *se = mx + D.N, *tl = se + D.N, *gm = tl + D.N, *lse = gm + D.N, *row_loss = lse + D.N;
  Tensor dxn;
  if (train) dxn = act(D.N, D.d);
  const float scale = ms.n_valid > 0 ? ms.grad_scale / float(ms.n_valid) : 0.f;
  const int64_t chunk = head_chunk_rows(D);
  Tensor logits = act(chunk, D.V);
  const size_t es = dtype_size(cdt);
  for (int64_t r0 = 0; r0 < D.N; r0 += chunk) {
    const int64_t rows = std::min(chunk, D.N - r0);
    const char* x = static_cast<const char*>(xn.raw()) + size_t(r0 * D.d) * es;
    ops->gemm(s, false, true, rows, D.V, D.d, 1.f, x, D.d, output->w.raw(), D.d, cdt, 0.f,
              logits.raw(), D.V, cdt);
    ops->ce_partial(s, logits.raw(), tg + r0, rows, D.V, D.v0, mx + r0, se + r0, tl + r0, cdt);
    float* g = mx + r0;
    if (tp > 1) {
      g = gm + r0;
      dev->copy(g, mx + r0, size_t(rows) * sizeof(float), s);
      par.tp->all_reduce_on(s, g, rows, DType::F32, ReduceOp::Max);
      ops->ce_rescale(s, mx + r0, g, se + r0, rows);
      // sumexp and the target logit of these rows, one reduction each.
      par.tp->all_reduce_on(s, se + r0, rows, DType::F32);
      par.tp->all_reduce_on(s, tl + r0, rows, DType::F32);
    }
    ops->ce_finish(s, g, se + r0, tl + r0, tg + r0, rows, lse + r0, row_loss + r0);
    if (!train) continue;
    ops->ce_bwd(s, logits.raw(), tg + r0, lse + r0, rows, D.V, D.v0, scale, logits.raw(), cdt);
    ops->gemm(s, true, false, D.V, D.d, rows, 1.f, logits.raw(), D.V, x, D.d, cdt, 1.f,
              output->g.raw(), D.d, DType::F32);
    ops->gemm(s, false, false, rows, D.d, D.V, 1.f, logits.raw(), D.V, output->w.raw(), D.d, cdt,
              0.f, static_cast<char*>(dxn.raw()) + size_t(r0 * D.d) * es, D.d, cdt);
  }
  if (ms.n_valid > 0)
    ops->loss_accumulate(s, row_loss, tg, D.N, 1.0 / double(ms.n_valid), loss_acc.as<double>());
  if (!train) return;
  logits = Tensor();
  xn = Tensor();
  dxn = reduce_rows(std::move(dxn), D);
  ms.dh_head = act(D.Ns, D.d);
  if (sp) {
    Tensor dw = f32({D.d});
    dw.zero();
    ops->rmsnorm_bwd(s, h.raw(), norm->w.raw(), rstd.data(), dxn.raw(), D.Ns, D.d, ms.dh_head.raw(),
                     dw.data(), /*accumulate=*/false, cdt);
    add_norm_grad(norm, dw);
  } else {
    // accumulate applies to dx (dh_head is fresh); dw always adds, so the
    // norm's gradient sums over micro-batches.
    ops->rmsnorm_bwd(s, h.raw(), norm->w.raw(), rstd.data(), dxn.raw(), D.Ns, D.d, ms.dh_head.raw(),
                     norm->g.data(), /*accumulate=*/false, cdt);
  }
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
    ST_CHECK(tokens != nullptr, "model: the first pipeline stage needs tokens");
    const std::vector<int32_t> tok = local_rows(tokens);
    for (size_t r = 0; r < tok.size(); ++r)
      ST_CHECK(tok[r] >= 0 && tok[r] < cfg.vocab_size, "token ", tok[r], " at local row ", r,
               " is outside the vocabulary [0, ", cfg.vocab_size, ")");
    ms.tokens = upload_i32(tok);
    hook_before(-1);
    h = embed_forward(D, ms.tokens);
    hook_after(-1);
  } else {
    ST_CHECK(x_in != nullptr && x_in->numel() == D.Ns * D.d,
             "model: a pipeline stage without the embedding needs x_in of ", D.Ns * D.d,
             " elements");
    h = act(D.Ns, D.d);
    dev->copy(h.raw(), x_in->raw(), h.bytes(), cs());
  }
  if (keep) ms.acts.resize(size_t(l1 - l0));
  h = layers_forward(l0, l1, D, std::move(h), keep ? &ms.acts : nullptr, ms.mode);
  if (!par.has_head) {
    ST_CHECK(x_out != nullptr, "model: a pipeline stage without the head needs x_out");
    *x_out = std::move(h);
    return;
  }
  ST_CHECK(targets != nullptr, "model: the last pipeline stage needs targets");
  const std::vector<int32_t> tgt = local_rows(targets);
  for (size_t r = 0; r < tgt.size(); ++r)
    ST_CHECK(tgt[r] < cfg.vocab_size, "target ", tgt[r], " at local row ", r,
             " is outside the vocabulary [0, ", cfg.vocab_size, ")");
  // Valid targets of the whole micro-batch: every cp rank holds the full array.
  ms.n_valid = 0;
  for (int64_t i = 0; i < D.B * D.Tg; ++i) ms.n_valid += targets[i] >= 0;
  ms.targets = upload_i32(tgt);
  hook_before(cfg.n_layers);
  head_forward(ms, std::move(h), /*train=*/keep);
  hook_after(cfg.n_layers);
}

int Model::in_flight() const { return int(impl_->micros.size()); }

int64_t Model::boundary_elems(int B, int T) const {
  return impl_->dims(B, T).Ns * impl_->cfg.d_model;
}

void Model::stage_forward(int micro, const int32_t* tokens, const Tensor* x_in,
                          const int32_t* targets, int B, int T, ActCkpt mode, float grad_scale,
                          Tensor* x_out) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  ST_CHECK(m.micros.count(micro) == 0, "model: micro-batch ", micro,
           " is already in flight (forwarded, not yet backwarded)");
  MicroState ms;
  ms.D = m.dims(B, T);
  ms.mode = mode;
  ms.grad_scale = grad_scale;
  m.ensure_rope(T);
  m.span_begin(true);
  m.forward(ms, tokens, x_in, targets, /*keep=*/true, x_out);
  m.span_end();
  m.micros.emplace(micro, std::move(ms));
}

void Model::stage_backward(int micro, const Tensor* dy, float grad_scale, Tensor* dx_in) {
  Impl& m = *impl_;
  auto it = m.micros.find(micro);
  ST_CHECK(it != m.micros.end(), "model: stage_backward of micro-batch ", micro,
           " that is not in flight");
  MicroState ms = std::move(it->second);
  m.micros.erase(it);
  const Dims& D = ms.D;
  m.ensure_rope(D.Tg);
  m.span_begin(false);
  Tensor dh;
  if (m.par.has_head) {
    // The head's backward ran in its forward; its gradients are complete.
    ST_CHECK(grad_scale == ms.grad_scale, "model: stage_backward of micro-batch ", micro,
             " with grad_scale ", grad_scale, " but its forward used ", ms.grad_scale);
    dh = std::move(ms.dh_head);
    m.grads_ready({m.output, m.norm});
  } else {
    ST_CHECK(dy != nullptr && dy->numel() == D.Ns * D.d,
             "model: a pipeline stage without the head needs dy of ", D.Ns * D.d, " elements");
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
    ST_CHECK(dx_in != nullptr, "model: a pipeline stage without the embedding needs dx_in");
    *dx_in = std::move(dh);
  }
  m.span_end();
}
}  // namespace st
