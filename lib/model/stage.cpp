// The pipeline-stage API (stage_forward / stage_backward with several
// micro-batches in flight), the first stage's vocab-parallel embedding, the
// last stage's final norm, vocab-parallel LM head and cross-entropy, and the
// tensor-parallel plumbing (gather / reduce of the residual stream rows,
// norm-weight gradient reduction under sequence parallelism).
#include <cmath>
#include <cstring>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "kernels/ops.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace k = kernels;
namespace {
constexpr MemCat kAct = MemCat::Activations;
}  // namespace

void Model::Impl::grads_ready(std::initializer_list<const Param*> ps) {
  if (!hooks.grad_ready) return;
  for (const Param* p : ps) hooks.grad_ready(int(p - params.data()));
}

Tensor Model::Impl::gather_rows(const Tensor& x, const Dims& D) {
  Tensor out({D.N, D.d}, kAct);
  if (!sp) {
    std::memcpy(out.data(), x.data(), x.bytes());
    return out;
  }
  par.tp->all_gather(x.data(), out.data(), D.Ns * D.d);
  return out;
}

Tensor Model::Impl::reduce_rows(Tensor partial, const Dims& D) {
  if (tp == 1) return partial;
  if (!sp) {
    par.tp->all_reduce_sum(partial.data(), D.N * D.d);
    return partial;
  }
  Tensor out({D.Ns, D.d}, kAct);
  par.tp->reduce_scatter_sum(partial.data(), out.data(), D.Ns * D.d);
  return out;
}

void Model::Impl::add_norm_grad(Param* p, Tensor& dw_local) {
  if (sp) par.tp->all_reduce_sum(dw_local.data(), dw_local.numel());
  k::add_inplace(p->g.data(), dw_local.data(), dw_local.numel());
}

Tensor Model::Impl::embed_forward(const Dims& D, const int32_t* tok) {
  if (tp == 1) {
    Tensor h({D.N, D.d}, kAct);
    k::embedding_fwd(tok, D.N, tok_emb->w.data(), D.V, D.d, h.data());
    return h;
  }
  for (int64_t r = 0; r < D.N; ++r)
    ST_CHECK(tok[r] >= 0 && tok[r] < cfg.vocab_size, "token ", tok[r], " at local row ", r,
             " is outside the vocabulary [0, ", cfg.vocab_size, ")");
  Tensor part({D.N, D.d}, kAct);
  k::embedding_fwd_shard(tok, D.N, tok_emb->w.data(), D.v0, D.V, D.d, part.data());
  return reduce_rows(std::move(part), D);
}

void Model::Impl::embed_backward(const Dims& D, const int32_t* tok, const Tensor& dh) {
  if (tp == 1) {
    k::embedding_bwd(tok, D.N, dh.data(), D.V, D.d, tok_emb->g.data());
    return;
  }
  if (sp) {
    Tensor full = gather_rows(dh, D);
    k::embedding_bwd_shard(tok, D.N, full.data(), D.v0, D.V, D.d, tok_emb->g.data());
  } else {
    k::embedding_bwd_shard(tok, D.N, dh.data(), D.v0, D.V, D.d, tok_emb->g.data());
  }
}

float Model::Impl::head_forward(MicroState& ms, Tensor h, bool keep) {
  const Dims& D = ms.D;
  const int32_t* tg = ms.targets.data();
  Tensor rstd({D.Ns}, kAct), xnl({D.Ns, D.d}, kAct);
  k::rmsnorm_fwd(h.data(), norm->w.data(), D.Ns, D.d, float(cfg.norm_eps), xnl.data(), rstd.data());
  Tensor xn = sp ? gather_rows(xnl, D) : std::move(xnl);
  xnl = Tensor();
  Tensor logits({D.N, D.V}, kAct);
  k::gemm(false, true, D.N, D.V, D.d, 1.f, xn.data(), output->w.data(), 0.f, logits.data());
  Tensor lse({D.N}, kAct);
  // Valid targets of the whole micro-batch (all cp ranks).
  int64_t n_local = 0;
  for (int64_t r = 0; r < D.N; ++r) n_local += tg[r] >= 0;
  double nv = double(n_local);
  if (cp > 1) par.cp->all_reduce_sum(&nv, 1);
  const int64_t n_valid = int64_t(nv);
  float loss = 0.f;
  if (tp == 1) {
    int64_t nl = 0;
    const float mean = k::cross_entropy_fwd(logits.data(), tg, D.N, D.V, lse.data(), &nl);
    loss = cp == 1 ? mean : (n_valid ? float(double(mean) * double(nl) / double(n_valid)) : 0.f);
  } else {
    for (int64_t r = 0; r < D.N; ++r)
      ST_CHECK(tg[r] < cfg.vocab_size, "target ", tg[r], " at local row ", r,
               " is outside the vocabulary [0, ", cfg.vocab_size, ")");
    std::vector<float> mx(size_t(D.N));
    std::vector<double> mxd(size_t(D.N)), sums(size_t(2 * D.N));
    k::row_max(logits.data(), D.N, D.V, mx.data());
    for (int64_t r = 0; r < D.N; ++r) mxd[size_t(r)] = mx[size_t(r)];
    par.tp->all_reduce_max(mxd.data(), D.N);
    for (int64_t r = 0; r < D.N; ++r) mx[size_t(r)] = float(mxd[size_t(r)]);
    k::cross_entropy_shard_sums(logits.data(), tg, D.N, D.V, D.v0, mx.data(), sums.data(),
                                sums.data() + D.N);
    par.tp->all_reduce_sum(sums.data(), 2 * D.N);
    double total = 0;
    for (int64_t r = 0; r < D.N; ++r) {
      lse.data()[r] = mx[size_t(r)] + float(std::log(sums[size_t(r)]));
      if (tg[r] >= 0) total += double(lse.data()[r]) - sums[size_t(D.N + r)];
    }
    loss = n_valid ? float(total / double(n_valid)) : 0.f;
  }
  if (keep) {
    ms.hL = std::move(h);
    ms.rstd = std::move(rstd);
    ms.xn = std::move(xn);
    ms.logits = std::move(logits);
    ms.lse = std::move(lse);
    ms.n_valid = n_valid;
  }
  return loss;
}

Tensor Model::Impl::head_backward(MicroState& ms, float grad_scale) {
  const Dims& D = ms.D;
  const int32_t* tg = ms.targets.data();
  // Everything is scaled by grad_scale at the source, so parameter grads
  // accumulate directly. The logits become dlogits in place.
  if (tp == 1) {
    k::cross_entropy_bwd(ms.logits.data(), tg, ms.lse.data(), D.N, D.V, ms.n_valid, grad_scale,
                         ms.logits.data());
  } else {
    const float s = ms.n_valid > 0 ? grad_scale / float(ms.n_valid) : 0.f;
    k::cross_entropy_bwd_shard(ms.logits.data(), tg, ms.lse.data(), D.N, D.V, D.v0, s,
                               ms.logits.data());
  }
  ms.lse = Tensor();
  k::gemm(true, false, D.V, D.d, D.N, 1.f, ms.logits.data(), ms.xn.data(), 1.f, output->g.data());
  Tensor dxn({D.N, D.d}, kAct);
  k::gemm(false, false, D.N, D.d, D.V, 1.f, ms.logits.data(), output->w.data(), 0.f, dxn.data());
  ms.logits = Tensor();
  ms.xn = Tensor();
  dxn = reduce_rows(std::move(dxn), D);
  Tensor dh({D.Ns, D.d}, kAct);
  if (sp) {
    Tensor dw({D.d}, kAct);
    k::rmsnorm_bwd(ms.hL.data(), norm->w.data(), ms.rstd.data(), dxn.data(), D.Ns, D.d, dh.data(),
                   dw.data(), /*accumulate=*/false);
    add_norm_grad(norm, dw);
  } else {
    k::rmsnorm_bwd(ms.hL.data(), norm->w.data(), ms.rstd.data(), dxn.data(), D.Ns, D.d, dh.data(),
                   norm->g.data(), /*accumulate=*/false);
  }
  ms.hL = Tensor();
  ms.rstd = Tensor();
  grads_ready({output, norm});
  return dh;
}

float Model::Impl::forward(MicroState& ms, const int32_t* tokens, const float* x_in,
                           const int32_t* targets, bool keep, std::vector<float>* x_out) {
  const Dims& D = ms.D;
  // This cp rank's rows of a full [B, Tg] token array.
  auto local_rows = [&](const int32_t* full) {
    std::vector<int32_t> out(size_t(D.N));
    for (int64_t b = 0; b < D.B; ++b)
      for (int64_t t = 0; t < D.T; ++t) out[size_t(b * D.T + t)] = full[b * D.Tg + pos[size_t(t)]];
    return out;
  };
  Tensor h;
  if (par.has_embedding) {
    ST_USAGE_CHECK(tokens != nullptr, "model: the first pipeline stage needs tokens");
    ms.tokens = local_rows(tokens);
    hook_before(-1);
    h = embed_forward(D, ms.tokens.data());
    hook_after(-1);
  } else {
    ST_USAGE_CHECK(x_in != nullptr, "model: a pipeline stage without the embedding needs x_in");
    h = Tensor({D.Ns, D.d}, kAct);
    std::memcpy(h.data(), x_in, h.bytes());
  }
  if (keep) ms.acts.resize(size_t(l1 - l0));
  h = layers_forward(l0, l1, D, std::move(h), keep ? &ms.acts : nullptr, ms.mode);
  if (!par.has_head) {
    ST_USAGE_CHECK(x_out != nullptr, "model: a pipeline stage without the head needs x_out");
    x_out->assign(h.data(), h.data() + h.numel());
    return 0.f;
  }
  ST_USAGE_CHECK(targets != nullptr, "model: the last pipeline stage needs targets");
  ms.targets = local_rows(targets);
  hook_before(cfg.n_layers);
  const float loss = head_forward(ms, std::move(h), keep);
  hook_after(cfg.n_layers);
  return loss;
}

int Model::in_flight() const { return int(impl_->micros.size()); }

int64_t Model::boundary_elems(int B, int T) const {
  return impl_->dims(B, T).Ns * impl_->cfg.d_model;
}

float Model::stage_forward(int micro, const int32_t* tokens, const float* x_in,
                           const int32_t* targets, int B, int T, ActCkpt mode,
                           std::vector<float>* x_out, PhaseTimes* t) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  ST_USAGE_CHECK(m.micros.count(micro) == 0, "model: micro-batch ", micro,
                 " is already in flight (forwarded, not yet backwarded)");
  const double t0 = wall_time();
  MicroState ms;
  ms.D = m.dims(B, T);
  ms.mode = mode;
  m.ensure_rope(T);
  const float loss = m.forward(ms, tokens, x_in, targets, /*keep=*/true, x_out);
  m.micros.emplace(micro, std::move(ms));
  if (t) t->fwd_s += wall_time() - t0;
  return loss;
}

void Model::stage_backward(int micro, const float* dy, float grad_scale, std::vector<float>* dx_in,
                           PhaseTimes* t) {
  Impl& m = *impl_;
  auto it = m.micros.find(micro);
  ST_USAGE_CHECK(it != m.micros.end(), "model: stage_backward of micro-batch ", micro,
                 " that is not in flight");
  const double t0 = wall_time();
  MicroState ms = std::move(it->second);
  m.micros.erase(it);
  const Dims& D = ms.D;
  m.ensure_rope(D.Tg);
  Tensor dh;
  if (m.par.has_head) {
    m.hook_before(m.cfg.n_layers);
    dh = m.head_backward(ms, grad_scale);
    m.hook_after(m.cfg.n_layers);
  } else {
    ST_USAGE_CHECK(dy != nullptr, "model: a pipeline stage without the head needs dy");
    dh = Tensor({D.Ns, D.d}, kAct);
    std::memcpy(dh.data(), dy, dh.bytes());
  }
  m.layers_backward(m.l0, m.l1, D, ms.acts, dh, ms.mode);
  if (m.par.has_embedding) {
    m.hook_before(-1);
    m.embed_backward(D, ms.tokens.data(), dh);
    m.grads_ready({m.tok_emb});
    m.hook_after(-1);
  } else {
    ST_USAGE_CHECK(dx_in != nullptr, "model: a pipeline stage without the embedding needs dx_in");
    dx_in->assign(dh.data(), dh.data() + dh.numel());
  }
  if (t) t->bwd_s += wall_time() - t0;
}
}  // namespace st
