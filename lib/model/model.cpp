// Model: parameter creation with seeded init (each rank draws its slice of
// the single-rank weights), the parallel layout checks, micro-batch shapes,
// RoPE tables for this rank's token positions, the pp = 1 drivers
// (forward_backward, forward_loss) on top of the stage API, and parameter
// counting. The stage API itself is in stage.cpp, blocks in block.cpp.
#include "model/model.hpp"

#include <cmath>
#include <limits>

#include "comm/communicator.hpp"
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
// splitmix64's state advances by a constant per draw, so any element of the
// stream can be computed directly: element i of the global tensor is the
// cos (even i) or sin (odd i) half of Box-Muller pair i/2, from draws i-i%2
// and i-i%2+1. That lets every tensor-parallel rank draw only its slice and
// get exactly the single-rank values.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
float normal_at(uint64_t s_init, int64_t i, double std) {
  const double two_pi = 6.283185307179586476925286766559;
  uint64_t s = s_init + uint64_t(i - i % 2) * kGolden;
  // u1 in (0, 1], u2 in [0, 1): 53-bit uniforms.
  const double u1 = (double(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = double(splitmix64(s) >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  return i % 2 == 0 ? float(std * r * std::cos(two_pi * u2))
                    : float(std * r * std::sin(two_pi * u2));
}

// Fill t (a block of the global tensor of shape gshape starting at offset;
// 1-D or 2-D) with its elements of the global stream.
void fill_normal_slice(Tensor& t, uint64_t seed, uint64_t index, double std,
                       const std::vector<int64_t>& gshape, const std::vector<int64_t>& offset) {
  uint64_t s = seed;
  s = splitmix64(s) ^ (0xD1B54A32D192ED03ull * (index + 1));
  float* p = t.data();
  if (t.shape().size() == 1) {
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal_at(s, offset[0] + i, std);
    return;
  }
  // Each element is a pure function of its global index: the rows can be
  // filled by any number of threads (a 7B model is 6.7e9 log/sqrt/sincos).
  const int64_t rows = t.dim(0), cols = t.dim(1);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (offset[0] + r) * gshape[1] + offset[1];
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] = normal_at(s, base + c, std);
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
  ST_USAGE_CHECK(T % (2 * cp) == 0 || cp == 1, "context parallelism cp = ", cp,
                 " needs the sequence length (", T, ") to be a multiple of 2*cp = ", 2 * cp);
  Dims D;
  D.B = B;
  D.Tg = T;
  D.T = T / cp;
  D.N = int64_t(B) * D.T;
  ST_USAGE_CHECK(!sp || D.N % tp == 0, "sequence parallelism: the ", D.N,
                 " local token rows (micro_batch x seq_len / cp) must be a multiple of tp = ", tp);
  D.Ns = sp ? D.N / tp : D.N;
  D.d = cfg.d_model;
  D.Hq = cfg.n_heads / tp;
  D.Hkv = cfg.n_kv_heads / tp;
  D.hd = cfg.d_model / cfg.n_heads;
  D.F = cfg.ffn_hidden / tp;
  D.V = cfg.vocab_size / tp;
  D.v0 = D.V * tp_rank;
  return D;
}

std::vector<int32_t> Model::Impl::positions(int r, int64_t Tg) const {
  std::vector<int32_t> p(size_t(Tg / cp));
  if (cp == 1) {
    for (int64_t t = 0; t < Tg; ++t) p[size_t(t)] = int32_t(t);
    return p;
  }
  // Chunks r and 2cp-1-r of 2cp equal chunks (causal load balance).
  const int64_t C = Tg / (2 * cp);
  for (int64_t t = 0; t < C; ++t) {
    p[size_t(t)] = int32_t(r * C + t);
    p[size_t(C + t)] = int32_t((2 * cp - 1 - r) * C + t);
  }
  return p;
}

void Model::Impl::ensure_rope(int64_t Tg) {
  if (rope_T == Tg) return;
  const int64_t hd = cfg.d_model / cfg.n_heads, h2 = hd / 2;
  pos = positions(cp_rank, Tg);
  std::vector<float> c(size_t(Tg * h2)), s(size_t(Tg * h2));
  k::rope_table(Tg, hd, cfg.rope_theta, 0, c.data(), s.data());
  rope_cos.resize(pos.size() * size_t(h2));
  rope_sin.resize(pos.size() * size_t(h2));
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t i = 0; i < h2; ++i) {
      rope_cos[t * size_t(h2) + size_t(i)] = c[size_t(pos[t] * h2 + i)];
      rope_sin[t * size_t(h2) + size_t(i)] = s[size_t(pos[t] * h2 + i)];
    }
  rope_T = Tg;
}

Model::Model(const ModelCfg& cfg, uint64_t seed, const ModelParallel& par)
    : impl_(std::make_unique<Impl>()) {
  check_cfg(cfg);
  Impl& m = *impl_;
  m.cfg = cfg;
  m.par = par;
  const int L = cfg.n_layers;
  if (par.tp) m.tp = par.tp->size(), m.tp_rank = par.tp->rank();
  if (par.cp) m.cp = par.cp->size(), m.cp_rank = par.cp->rank();
  m.sp = par.sp;
  m.l0 = par.layer_begin;
  m.l1 = par.layer_end < 0 ? L : par.layer_end;
  ST_USAGE_CHECK(!m.sp || m.tp > 1, "parallel.sp needs tensor parallelism (parallel.tp > 1)");
  ST_USAGE_CHECK(0 <= m.l0 && m.l0 <= m.l1 && m.l1 <= L, "pipeline stage layers [", m.l0, ", ",
                 m.l1, ") are not a range of model.n_layers = ", L);
  const int tp = m.tp;
  ST_USAGE_CHECK(cfg.n_heads % tp == 0 && cfg.n_kv_heads % tp == 0, "parallel.tp = ", tp,
                 " must divide model.n_heads (", cfg.n_heads, ") and model.n_kv_heads (",
                 cfg.n_kv_heads, ")");
  ST_USAGE_CHECK(cfg.ffn_hidden % tp == 0, "parallel.tp = ", tp, " must divide model.ffn_hidden (",
                 cfg.ffn_hidden, ")");
  ST_USAGE_CHECK(cfg.vocab_size % tp == 0, "parallel.tp = ", tp, " must divide model.vocab_size (",
                 cfg.vocab_size, ")");
  const int64_t d = cfg.d_model, hd = cfg.d_model / cfg.n_heads;
  const int64_t qd = cfg.n_heads * hd, kd = cfg.n_kv_heads * hd, F = cfg.ffn_hidden;
  const int64_t V = cfg.vocab_size;
  // Reserve first: LayerParams hold pointers into the vector.
  m.params.reserve(size_t(3 + 9 * L));
  uint64_t index = 0;  // the parameter's index in the single-rank model (its init stream)
  // split: -1 replicated, 0 rows, 1 columns over tp.
  auto add = [&](std::string name, std::vector<int64_t> gshape, int split, int layer, bool is_norm,
                 bool own) -> Param* {
    const uint64_t idx = index++;
    if (!own) return nullptr;
    Param p;
    p.name = std::move(name);
    p.global_shape = gshape;
    p.offset.assign(gshape.size(), 0);
    p.layer = layer;
    std::vector<int64_t> shape = gshape;
    if (split >= 0 && tp > 1) {
      shape[size_t(split)] /= tp;
      p.offset[size_t(split)] = shape[size_t(split)] * m.tp_rank;
      p.tp_sharded = true;
    }
    p.w = Tensor(shape, MemCat::Params);
    p.g = Tensor(shape, MemCat::Grads);
    p.decay = !is_norm;
    if (is_norm) {
      for (int64_t i = 0; i < p.w.numel(); ++i) p.w.data()[i] = 1.f;
    } else {
      fill_normal_slice(p.w, seed, idx, cfg.init_std, p.global_shape, p.offset);
    }
    m.params.push_back(std::move(p));
    return &m.params.back();
  };
  m.tok_emb = add("tok_embeddings.weight", {V, d}, 0, -1, false, par.has_embedding);
  m.layers.resize(size_t(L));
  for (int l = 0; l < L; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    const bool own = l >= m.l0 && l < m.l1;
    LayerParams& P = m.layers[size_t(l)];
    P.attn_norm = add(pre + "attention_norm.weight", {d}, -1, l, true, own);
    P.wq = add(pre + "attention.wq.weight", {qd, d}, 0, l, false, own);
    P.wk = add(pre + "attention.wk.weight", {kd, d}, 0, l, false, own);
    P.wv = add(pre + "attention.wv.weight", {kd, d}, 0, l, false, own);
    P.wo = add(pre + "attention.wo.weight", {d, qd}, 1, l, false, own);
    P.ffn_norm = add(pre + "ffn_norm.weight", {d}, -1, l, true, own);
    P.w1 = add(pre + "feed_forward.w1.weight", {F, d}, 0, l, false, own);
    P.w3 = add(pre + "feed_forward.w3.weight", {F, d}, 0, l, false, own);
    P.w2 = add(pre + "feed_forward.w2.weight", {d, F}, 1, l, false, own);
  }
  m.norm = add("norm.weight", {d}, -1, L, true, par.has_head);
  m.output = add("output.weight", {V, d}, 0, L, false, par.has_head);
}

Model::~Model() = default;

const ModelCfg& Model::cfg() const { return impl_->cfg; }
const ModelParallel& Model::parallel() const { return impl_->par; }
void Model::set_hooks(ModelHooks h) { impl_->hooks = std::move(h); }

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

void check_batch(const ModelCfg& c, int B, int T) {
  ST_USAGE_CHECK(B >= 1 && T >= 1, "batch must be at least 1x1, got B=", B, " T=", T);
  ST_USAGE_CHECK(T <= c.seq_len, "sequence length T=", T, " exceeds model.seq_len=", c.seq_len);
}

float Model::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  ST_USAGE_CHECK(m.par.has_embedding && m.par.has_head && m.l0 == 0 && m.l1 == m.cfg.n_layers,
                 "forward_loss needs the whole model on this rank (pp = 1)");
  MicroState ms;
  ms.D = m.dims(B, T);
  ms.mode = ActCkpt::Full;
  m.ensure_rope(T);
  return m.forward(ms, tokens, nullptr, targets, /*keep=*/false, nullptr);
}

float Model::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                              float grad_scale, ActCkpt mode, PhaseTimes* times) {
  Impl& m = *impl_;
  ST_USAGE_CHECK(m.par.has_embedding && m.par.has_head && m.l0 == 0 && m.l1 == m.cfg.n_layers,
                 "forward_backward needs the whole model on this rank (pp = 1); pipeline stages "
                 "use stage_forward / stage_backward");
  constexpr int kMicro = std::numeric_limits<int>::min();  // reserved id
  const float loss = stage_forward(kMicro, tokens, nullptr, targets, B, T, mode, nullptr, times);
  stage_backward(kMicro, nullptr, grad_scale, nullptr, times);
  return loss;
}
}  // namespace st
