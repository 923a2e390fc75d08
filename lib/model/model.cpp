// Model: parameter creation and seeded init, the step driver (embedding ->
// layers -> final norm -> LM head -> cross-entropy, then the backward in
// reverse), phase timing, and parameter counting.
#include "model/model.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/util.hpp"
#include "kernels/ops.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace k = kernels;
namespace {
constexpr MemCat kAct = MemCat::Activations;

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// normal(0, std) from splitmix64 + Box-Muller, one stream per parameter
// (seeded by the run seed and the parameter's index), so the values do not
// depend on the standard library or on the order parameters are filled in.
void fill_normal(Tensor& t, uint64_t seed, uint64_t index, double std) {
  uint64_t s = seed;
  s = splitmix64(s) ^ (0xD1B54A32D192ED03ull * (index + 1));
  float* p = t.data();
  const int64_t n = t.numel();
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t i = 0; i < n; i += 2) {
    // u1 in (0, 1], u2 in [0, 1): 53-bit uniforms.
    const double u1 = (double(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(splitmix64(s) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    p[i] = float(std * r * std::cos(two_pi * u2));
    if (i + 1 < n) p[i + 1] = float(std * r * std::sin(two_pi * u2));
  }
}

void check_cfg(const ModelCfg& c) {
  ST_USAGE_CHECK(c.n_layers >= 1, "model.n_layers must be >= 1, got ", c.n_layers);
  ST_USAGE_CHECK(c.n_heads >= 1 && c.d_model % c.n_heads == 0, "model.d_model (", c.d_model,
                 ") must be a multiple of model.n_heads (", c.n_heads, ")");
  ST_USAGE_CHECK((c.d_model / c.n_heads) % 2 == 0,
                 "head dim d_model/n_heads = ", c.d_model / c.n_heads, " must be even for RoPE");
  ST_USAGE_CHECK(c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0, "model.n_heads (", c.n_heads,
                 ") must be a multiple of model.n_kv_heads (", c.n_kv_heads, ")");
  ST_USAGE_CHECK(c.ffn_hidden >= 1, "model.ffn_hidden must be >= 1, got ", c.ffn_hidden);
  ST_USAGE_CHECK(c.vocab_size >= 2, "model.vocab_size must be >= 2, got ", c.vocab_size);
  ST_USAGE_CHECK(c.seq_len >= 1, "model.seq_len must be >= 1, got ", c.seq_len);
}
}  // namespace

ActCkpt parse_act_ckpt(const std::string& s) {
  if (s == "none") return ActCkpt::None;
  if (s == "selective") return ActCkpt::Selective;
  if (s == "full") return ActCkpt::Full;
  throw UsageError("train.act_ckpt: '" + s + "' is not valid; use none, selective or full");
}

int64_t count_params(const ModelCfg& c) {
  const int64_t d = c.d_model, hd = c.d_model / c.n_heads;
  const int64_t qd = c.n_heads * hd, kd = c.n_kv_heads * hd, F = c.ffn_hidden, V = c.vocab_size;
  const int64_t layer = 2 * d + qd * d + 2 * kd * d + d * qd + 3 * F * d;
  return V * d + c.n_layers * layer + d + V * d;
}

Dims Model::Impl::dims(int B, int T) const {
  Dims D;
  D.B = B;
  D.T = T;
  D.N = int64_t(B) * T;
  D.d = cfg.d_model;
  D.Hq = cfg.n_heads;
  D.Hkv = cfg.n_kv_heads;
  D.hd = cfg.d_model / cfg.n_heads;
  D.F = cfg.ffn_hidden;
  D.V = cfg.vocab_size;
  return D;
}

void Model::Impl::ensure_rope(int64_t T) {
  if (rope_T == T) return;
  const int64_t hd = cfg.d_model / cfg.n_heads;
  rope_cos.assign(size_t(T * hd / 2), 0.f);
  rope_sin.assign(size_t(T * hd / 2), 0.f);
  k::rope_table(T, hd, cfg.rope_theta, 0, rope_cos.data(), rope_sin.data());
  rope_T = T;
}

Model::Model(const ModelCfg& cfg, uint64_t seed, const ModelParallel& par)
    : impl_(std::make_unique<Impl>()) {
  check_cfg(cfg);
  Impl& m = *impl_;
  m.cfg = cfg;
  m.par = par;
  // Placeholder until the parallel layouts land: only the single-rank layout.
  ST_USAGE_CHECK(par.tp == nullptr && par.cp == nullptr && !par.sp && par.layer_begin == 0 &&
                     (par.layer_end == -1 || par.layer_end == cfg.n_layers) &&
                     par.has_embedding && par.has_head,
                 "model: parallel layouts are not implemented yet");
  const int64_t d = cfg.d_model, hd = cfg.d_model / cfg.n_heads;
  const int64_t qd = cfg.n_heads * hd, kd = cfg.n_kv_heads * hd, F = cfg.ffn_hidden;
  const int64_t V = cfg.vocab_size;
  // Reserve first: LayerParams hold pointers into the vector.
  m.params.reserve(size_t(3 + 9 * cfg.n_layers));
  auto add = [&](std::string name, std::vector<int64_t> shape, bool is_norm) {
    Param p;
    p.name = std::move(name);
    p.w = Tensor(shape, MemCat::Params);
    p.g = Tensor(shape, MemCat::Grads);
    p.decay = !is_norm;
    if (is_norm) {
      for (int64_t i = 0; i < p.w.numel(); ++i) p.w.data()[i] = 1.f;
    } else {
      fill_normal(p.w, seed, m.params.size(), cfg.init_std);
    }
    m.params.push_back(std::move(p));
    return &m.params.back();
  };
  m.tok_emb = add("tok_embeddings.weight", {V, d}, false);
  m.layers.resize(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    LayerParams& L = m.layers[size_t(l)];
    L.attn_norm = add(pre + "attention_norm.weight", {d}, true);
    L.wq = add(pre + "attention.wq.weight", {qd, d}, false);
    L.wk = add(pre + "attention.wk.weight", {kd, d}, false);
    L.wv = add(pre + "attention.wv.weight", {kd, d}, false);
    L.wo = add(pre + "attention.wo.weight", {d, qd}, false);
    L.ffn_norm = add(pre + "ffn_norm.weight", {d}, true);
    L.w1 = add(pre + "feed_forward.w1.weight", {F, d}, false);
    L.w3 = add(pre + "feed_forward.w3.weight", {F, d}, false);
    L.w2 = add(pre + "feed_forward.w2.weight", {d, F}, false);
  }
  m.norm = add("norm.weight", {d}, true);
  m.output = add("output.weight", {V, d}, false);
}

Model::~Model() = default;

const ModelCfg& Model::cfg() const { return impl_->cfg; }
const ModelParallel& Model::parallel() const { return impl_->par; }
void Model::set_hooks(ModelHooks h) { impl_->hooks = std::move(h); }
int Model::in_flight() const { return 0; }
int64_t Model::boundary_elems(int B, int T) const { return int64_t(B) * T * impl_->cfg.d_model; }
float Model::stage_forward(int, const int32_t*, const float*, const int32_t*, int, int, ActCkpt,
                           std::vector<float>*, PhaseTimes*) {
  throw UsageError("model: stage_forward is not implemented yet");
}
void Model::stage_backward(int, const float*, float, std::vector<float>*, PhaseTimes*) {
  throw UsageError("model: stage_backward is not implemented yet");
}

std::vector<Param*> Model::params() {
  std::vector<Param*> out;
  out.reserve(impl_->params.size());
  for (Param& p : impl_->params) out.push_back(&p);
  return out;
}

int64_t Model::num_params() const {
  int64_t n = 0;
  for (const Param& p : impl_->params) n += p.w.numel();
  return n;
}

void Model::zero_grad() {
  for (Param& p : impl_->params) p.g.zero();
}

namespace {
void check_batch(const ModelCfg& c, int B, int T) {
  ST_USAGE_CHECK(B >= 1 && T >= 1, "batch must be at least 1x1, got B=", B, " T=", T);
  ST_USAGE_CHECK(T <= c.seq_len, "sequence length T=", T, " exceeds model.seq_len=", c.seq_len);
}
}  // namespace

float Model::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  const Dims D = m.dims(B, T);
  m.ensure_rope(T);
  Tensor h({D.N, D.d}, kAct);
  k::embedding_fwd(tokens, D.N, m.tok_emb->w.data(), D.V, D.d, h.data());
  h = m.layers_forward(0, m.cfg.n_layers, D, std::move(h), nullptr, ActCkpt::Full);
  Tensor rstd({D.N}, kAct), xn({D.N, D.d}, kAct);
  k::rmsnorm_fwd(h.data(), m.norm->w.data(), D.N, D.d, float(m.cfg.norm_eps), xn.data(),
                 rstd.data());
  h = Tensor();
  Tensor logits({D.N, D.V}, kAct);
  k::gemm(false, true, D.N, D.V, D.d, 1.f, xn.data(), m.output->w.data(), 0.f, logits.data());
  Tensor lse({D.N}, kAct);
  return k::cross_entropy_fwd(logits.data(), targets, D.N, D.V, lse.data());
}

float Model::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                              float grad_scale, ActCkpt mode, PhaseTimes* times) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  const Dims D = m.dims(B, T);
  const int L = m.cfg.n_layers;
  const double t0 = wall_time();
  m.ensure_rope(T);

  // Forward.
  Tensor h({D.N, D.d}, kAct);
  k::embedding_fwd(tokens, D.N, m.tok_emb->w.data(), D.V, D.d, h.data());
  std::vector<BlockActs> acts(static_cast<size_t>(L));
  Tensor hL = m.layers_forward(0, L, D, std::move(h), &acts, mode);
  Tensor rstd({D.N}, kAct), xn({D.N, D.d}, kAct);
  k::rmsnorm_fwd(hL.data(), m.norm->w.data(), D.N, D.d, float(m.cfg.norm_eps), xn.data(),
                 rstd.data());
  Tensor logits({D.N, D.V}, kAct);
  k::gemm(false, true, D.N, D.V, D.d, 1.f, xn.data(), m.output->w.data(), 0.f, logits.data());
  Tensor lse({D.N}, kAct);
  int64_t n_valid = 0;
  const float loss = k::cross_entropy_fwd(logits.data(), targets, D.N, D.V, lse.data(), &n_valid);
  const double t1 = wall_time();

  // Backward: logits become dlogits in place; everything is scaled by
  // grad_scale at the source, so parameter grads accumulate directly.
  k::cross_entropy_bwd(logits.data(), targets, lse.data(), D.N, D.V, n_valid, grad_scale,
                       logits.data());
  lse = Tensor();
  k::gemm(true, false, D.V, D.d, D.N, 1.f, logits.data(), xn.data(), 1.f, m.output->g.data());
  Tensor dxn({D.N, D.d}, kAct);
  k::gemm(false, false, D.N, D.d, D.V, 1.f, logits.data(), m.output->w.data(), 0.f, dxn.data());
  logits = Tensor();
  xn = Tensor();
  Tensor dh({D.N, D.d}, kAct);
  k::rmsnorm_bwd(hL.data(), m.norm->w.data(), rstd.data(), dxn.data(), D.N, D.d, dh.data(),
                 m.norm->g.data(), /*accumulate=*/false);
  hL = Tensor();
  dxn = Tensor();
  m.layers_backward(0, L, D, acts, dh, mode);
  k::embedding_bwd(tokens, D.N, dh.data(), D.V, D.d, m.tok_emb->g.data());
  const double t2 = wall_time();
  if (times) {
    times->fwd_s += t1 - t0;
    times->bwd_s += t2 - t1;
  }
  return loss;
}
}  // namespace st
