// Model: parameter creation (the flat parameter and gradient buffers, each
// rank's slice of the single-rank seeded weights), the parallel layout
// checks, micro-batch shapes, RoPE tables for this rank's token positions,
// the loss accumulator and phase timers, and the pp = 1 drivers
// (forward_backward, forward_loss) on top of the stage API. The stage API
// itself is in stage.cpp, blocks in block.cpp, ring attention in
// ring_attention.cpp.
#include "model/model.hpp"

#include <cmath>
#include <limits>

#include "backend/backend.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/span_log.hpp"
#include "core/util.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace {
// Every parameter starts on a 64-element boundary of the flat buffers (256 B
// in fp32, 128 B in bf16: aligned for vector loads and cuBLASLt).
constexpr int64_t kAlign = 64;

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
  return cp_positions(r, cp, Tg);
}

std::vector<int32_t> cp_positions(int r, int cp, int64_t Tg) {
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

Tensor Model::Impl::upload_i32(const std::vector<int32_t>& host) {
  Tensor t({int64_t(host.size())}, DType::I32, MemCat::Activations, *dev);
  dev->copy_from_host(t.raw(), host.data(), host.size() * sizeof(int32_t), cs());
  return t;
}

void Model::Impl::ensure_rope(int64_t Tg) {
  if (rope_T == Tg) return;
  const int64_t hd = cfg.d_model / cfg.n_heads, h2 = hd / 2;
  pos.clear();
  pos_dev.clear();
  for (int r = 0; r < cp; ++r) pos.push_back(positions(r, Tg));
  const std::vector<int32_t>& mine = pos[size_t(cp_rank)];
  // A recording backend reads no values: no tables to compute.
  const size_t n = be->computes() ? mine.size() * size_t(h2) : 0;
  std::vector<float> c(n), s(n);
  if (n) rope_tables(mine.data(), int64_t(mine.size()), hd, cfg.rope_theta, c.data(), s.data());
  rope_cos = Tensor({int64_t(mine.size()), h2}, DType::F32, MemCat::Other, *dev);
  rope_sin = Tensor({int64_t(mine.size()), h2}, DType::F32, MemCat::Other, *dev);
  dev->copy_from_host(rope_cos.raw(), c.data(), rope_cos.bytes(), cs());
  dev->copy_from_host(rope_sin.raw(), s.data(), rope_sin.bytes(), cs());
  if (cp > 1)
    for (int r = 0; r < cp; ++r) pos_dev.push_back(upload_i32(pos[size_t(r)]));
  rope_T = Tg;
}

namespace {
// The forward and backward phases' one name: trace span and profiler range.
const char* phase_name(bool fwd) { return fwd ? "fwd" : "bwd"; }
}  // namespace

void Model::Impl::span_begin(bool fwd) {
  Span sp;
  for (auto* e : {&sp.iv.a, &sp.iv.b}) {
    if (!spare.empty()) {
      *e = std::move(spare.back());
      spare.pop_back();
    } else {
      *e = dev->create_event();
    }
  }
  sp.fwd = fwd;
  sp.iv.begin(cs());
  sp.mb = fwd ? fwd_calls++ : bwd_calls++;
  if (::st::spans::on()) sp.h0 = ::st::spans::epoch_now();
  // The device profiler's range (NVTX on CUDA), named as the trace span.
  if (auto* r = ::st::ranges::sink()) r->push(phase_name(fwd));
  pending.push_back(std::move(sp));
}

void Model::Impl::span_end() {
  Span& sp = pending.back();
  sp.iv.end(cs());
  // The trace's span: host times of the enqueue, which on the inline CPU
  // device are when the work ran (on a GPU, when it was issued).
  if (::st::spans::on())
    ::st::spans::add({phase_name(sp.fwd), "compute", sp.h0, ::st::spans::epoch_now(), sp.mb});
  if (auto* r = ::st::ranges::sink()) r->pop();
}

// ---- construction ----

Model::Model(const ModelCfg& cfg, uint64_t seed, const ModelParallel& par, const ModelOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  check_cfg(cfg);
  Impl& m = *impl_;
  m.cfg = cfg;
  m.par = par;
  m.seed = seed;
  m.be = opt.backend ? opt.backend : &cpu_backend();
  m.dev = &m.be->device();
  m.ops = &m.be->ops();
  ST_CHECK(opt.compute == DType::F32 || opt.compute == DType::BF16,
           "model compute dtype must be fp32 or bf16, got ", dtype_name(opt.compute));
  m.cdt = opt.compute;
  m.per_layer = opt.per_layer_weights;
  ST_CHECK(opt.head_chunk_bytes >= 0, "head chunk of ", opt.head_chunk_bytes, " bytes");
  m.head_chunk_bytes = opt.head_chunk_bytes;
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
  m.declare_params(par.has_embedding, par.has_head);
  m.allocate(opt.init_weights);
}

// Every parameter this rank holds (tp slice, pipeline stage), in forward
// order, with its place in the flat buffers and its init stream index.
void Model::Impl::declare_params(bool has_embedding, bool has_head) {
  Impl& m = *this;
  const int L = cfg.n_layers;
  const int64_t d = cfg.d_model, hd = cfg.d_model / cfg.n_heads;
  const int64_t qd = cfg.n_heads * hd, kd = cfg.n_kv_heads * hd, F = cfg.ffn_hidden;
  const int64_t V = cfg.vocab_size;
  // Reserve first: LayerParams hold pointers into the vector.
  m.params.reserve(size_t(3 + 9 * L));
  m.spans.assign(size_t(L) + 2, {0, 0});
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
    p.row = shape.size() > 1 ? numel_of(shape) / shape[0] : 1;
    p.w = Tensor::view(nullptr, shape, m.cdt, *m.dev);
    p.g = Tensor::view(nullptr, shape, DType::F32, *m.dev);
    p.decay = !is_norm;
    // The init stream index travels in flat_off until the layout is fixed.
    p.flat_off = int64_t(idx);
    auto& span = m.spans[size_t(layer + 1)];
    if (span.second == 0) span.first = m.flat_n;
    const int64_t n = numel_of(shape);
    m.flat_n += (n + kAlign - 1) / kAlign * kAlign;
    span.second = m.flat_n - span.first;
    m.params.push_back(std::move(p));
    return &m.params.back();
  };
  m.tok_emb = add("tok_embeddings.weight", {V, d}, 0, -1, false, has_embedding);
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
  m.norm = add("norm.weight", {d}, -1, L, true, has_head);
  m.output = add("output.weight", {V, d}, 0, L, false, has_head);
  // Fix the flat offsets (params were added in forward order), keeping the
  // init stream index aside.
  std::vector<uint64_t> stream_index;
  int64_t off = 0;
  for (Param& p : m.params) {
    stream_index.push_back(uint64_t(p.flat_off));
    p.flat_off = off;
    off += (p.w.numel() + kAlign - 1) / kAlign * kAlign;
  }
  m.init_index = std::move(stream_index);
}

// The loss accumulator, the flat gradient buffer and (unless per-layer) the
// flat weight buffer with every layer's views bound into it.
void Model::Impl::allocate(bool init_weights) {
  Impl& m = *this;
  const int L = cfg.n_layers;
  m.loss_acc = Tensor({1}, DType::F64, MemCat::Other, *m.dev);
  m.loss_acc.zero();
  m.grads = Tensor({std::max<int64_t>(m.flat_n, 1)}, DType::F32, MemCat::Grads, *m.dev);
  m.grads.zero();
  m.bind_grads();
  if (!m.per_layer) {
    m.weights = Tensor({std::max<int64_t>(m.flat_n, 1)}, m.cdt, MemCat::Params, *m.dev);
    m.weights.zero();  // the alignment padding, which buckets carry along
    for (int l = -1; l <= L; ++l)
      if (m.spans[size_t(l + 1)].second)
        m.bind_layer(l, static_cast<char*>(m.weights.raw()) +
                            size_t(m.spans[size_t(l + 1)].first) * dtype_size(m.cdt));
    if (init_weights)
      for (Param& p : m.params) m.upload_weights(p);
  }
}

Model::~Model() {
  if (impl_ && impl_->dev) impl_->dev->synchronize();
}

void Model::Impl::bind_layer(int layer, void* base) {
  const int64_t start = spans[size_t(layer + 1)].first;
  for (Param& p : params) {
    if (p.layer != layer) continue;
    p.w.rebind(base ? static_cast<char*>(base) + size_t(p.flat_off - start) * dtype_size(cdt)
                    : nullptr);
  }
}

void Model::Impl::bind_grads() {
  for (Param& p : params) p.g.rebind(grads.allocated() ? grads.data() + p.flat_off : nullptr);
}

void Model::Impl::upload_weights(Param& p) {
  const int64_t n = p.w.numel();
  // A recording backend reads no values: no host copy is made (the calls are).
  std::vector<float> host(be->computes() ? static_cast<size_t>(n) : 0);
  init_rows(p, 0, p.w.dim(0), host.data());
  if (cdt == DType::F32) {
    dev->copy_from_host(p.w.raw(), host.data(), size_t(n) * sizeof(float), cs());
  } else {
    Tensor tmp({n}, DType::F32, MemCat::Workspace, *dev);
    dev->copy_from_host(tmp.raw(), host.data(), size_t(n) * sizeof(float), cs());
    ops->cast(cs(), tmp.raw(), DType::F32, p.w.raw(), cdt, n);
  }
}

void Model::Impl::init_rows(const Param& p, int64_t row0, int64_t rows, float* out) const {
  if (!be->computes()) return;  // a recording backend: nothing reads the values
  const int64_t row = p.row;
  if (!p.decay) {  // norm weights
    std::fill(out, out + rows * row, 1.f);
    return;
  }
  const uint64_t idx = init_index[size_t(&p - params.data())];
  uint64_t s = seed;
  s = splitmix64(s) ^ (0xD1B54A32D192ED03ull * (idx + 1));
  const double std = cfg.init_std;
  if (p.w.shape().size() == 1) {
    for (int64_t i = 0; i < rows; ++i) out[i] = normal_at(s, p.offset[0] + row0 + i, std);
    return;
  }
  // Each element is a pure function of its global index: the rows can be
  // filled by any number of threads (a 7B model is 6.7e9 log/sqrt/sincos).
  const int64_t gcols = p.global_shape[1];
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (p.offset[0] + row0 + r) * gcols + p.offset[1];
    for (int64_t c = 0; c < row; ++c) out[r * row + c] = normal_at(s, base + c, std);
  }
}

// ---- accessors ----

const ModelCfg& Model::cfg() const { return impl_->cfg; }
const ModelParallel& Model::parallel() const { return impl_->par; }
Backend& Model::backend() const { return *impl_->be; }
DType Model::compute_dtype() const { return impl_->cdt; }
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

int64_t Model::flat_numel() const { return impl_->flat_n; }

std::pair<int64_t, int64_t> Model::layer_span(int layer) const {
  const auto& s = impl_->spans;
  if (layer + 1 < 0 || layer + 1 >= int(s.size())) return {0, 0};
  return s[size_t(layer + 1)];
}

void* Model::weights_at(int64_t flat_off) {
  Impl& m = *impl_;
  const size_t es = dtype_size(m.cdt);
  if (!m.per_layer) return static_cast<char*>(m.weights.raw()) + size_t(flat_off) * es;
  for (auto& [layer, t] : m.layer_w) {
    const auto [off, len] = m.spans[size_t(layer + 1)];
    if (flat_off >= off && flat_off < off + len)
      return static_cast<char*>(t.raw()) + size_t(flat_off - off) * es;
  }
  throw Error("model: flat offset " + std::to_string(flat_off) + " is not in a resident layer");
}

float* Model::grads() { return impl_->grads.allocated() ? impl_->grads.data() : nullptr; }

void Model::allocate_layer_weights(int layer) {
  Impl& m = *impl_;
  ST_CHECK(m.per_layer, "allocate_layer_weights without per_layer_weights");
  if (m.layer_w.count(layer)) return;
  const int64_t len = m.spans[size_t(layer + 1)].second;
  if (len == 0) return;
  Tensor t({len}, m.cdt, MemCat::Params, *m.dev);
  m.bind_layer(layer, t.raw());
  m.layer_w.emplace(layer, std::move(t));
}

void Model::release_layer_weights(int layer) {
  Impl& m = *impl_;
  auto it = m.layer_w.find(layer);
  if (it == m.layer_w.end()) return;
  m.bind_layer(layer, nullptr);
  m.layer_w.erase(it);
}

bool Model::layer_resident(int layer) const {
  return !impl_->per_layer || impl_->layer_w.count(layer) != 0;
}

void Model::allocate_grads() {
  Impl& m = *impl_;
  if (m.grads.allocated()) return;
  m.grads.allocate();
  m.grads.zero();
  m.bind_grads();
}

void Model::release_grads() {
  impl_->grads.release();
  impl_->bind_grads();
}

bool Model::grads_allocated() const { return impl_->grads.allocated(); }

void Model::zero_grad() { impl_->grads.zero(); }

void Model::init_values(const Param& p, int64_t row0, int64_t rows, float* out) const {
  impl_->init_rows(p, row0, rows, out);
}

// ---- loss and timing ----

double Model::take_loss() {
  Impl& m = *impl_;
  double h = 0;
  m.dev->copy_to_host(&h, m.loss_acc.raw(), sizeof h, m.cs());
  m.cs().synchronize();
  m.loss_acc.zero();
  return h;
}

StepMeasured Model::take_times() {
  Impl& m = *impl_;
  StepMeasured t = m.times_done;
  for (auto& sp : m.pending) {
    (sp.fwd ? t.fwd : t.bwd) += sp.iv.seconds();
    m.spare.push_back(std::move(sp.iv.a));
    m.spare.push_back(std::move(sp.iv.b));
  }
  m.pending.clear();
  m.times_done = {};
  m.fwd_calls = m.bwd_calls = 0;
  return t;
}

void check_batch(const ModelCfg& c, int B, int T) {
  ST_USAGE_CHECK(B >= 1 && T >= 1, "batch must be at least 1x1, got B=", B, " T=", T);
  ST_USAGE_CHECK(T <= c.seq_len, "sequence length T=", T, " exceeds model.seq_len=", c.seq_len);
}

float Model::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T) {
  Impl& m = *impl_;
  check_batch(m.cfg, B, T);
  ST_INTERNAL_CHECK(m.par.has_embedding && m.par.has_head && m.l0 == 0 && m.l1 == m.cfg.n_layers,
                    "forward_loss needs the whole model on this rank (pp = 1)");
  MicroState ms;
  ms.D = m.dims(B, T);
  ms.mode = ActCkpt::Full;
  m.ensure_rope(T);
  take_loss();  // start from zero
  m.forward(ms, tokens, nullptr, targets, /*keep=*/false, nullptr);
  return float(take_loss());
}

float Model::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                              float grad_scale, ActCkpt mode) {
  Impl& m = *impl_;
  ST_INTERNAL_CHECK(m.par.has_embedding && m.par.has_head && m.l0 == 0 && m.l1 == m.cfg.n_layers,
                    "forward_backward needs the whole model on this rank (pp = 1); pipeline stages "
                    "use stage_forward / stage_backward");
  constexpr int kMicro = std::numeric_limits<int>::min();  // reserved id
  take_loss();
  stage_forward(kMicro, tokens, nullptr, targets, B, T, mode, grad_scale, nullptr);
  stage_backward(kMicro, nullptr, grad_scale, nullptr);
  return float(take_loss());
}
}  // namespace st
