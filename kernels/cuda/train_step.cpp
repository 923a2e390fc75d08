// CudaLlama: see train_step.hpp. The block math mirrors lib/model/block.cpp
// (single rank): RMSNorm, q/k/v GEMMs, interleaved RoPE on q and k, causal
// GQA attention, wo GEMM added to the residual, RMSNorm, w1/w3 GEMMs,
// SwiGLU, w2 GEMM added to the residual; then final RMSNorm, untied LM head,
// mean cross-entropy. Linear weights are [out, in], y = x W^T.
#include "kernels/cuda/train_step.hpp"

#include <curand.h>

#include <cmath>

#include "core/error.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace st::kernels::cuda {
using st::cuda::DeviceBuffer;

namespace {
DeviceBuffer bf16_buf(int64_t n) { return DeviceBuffer(size_t(n) * sizeof(bf16), MemCat::Activations); }
DeviceBuffer f32_buf(int64_t n, MemCat c = MemCat::Activations) {
  return DeviceBuffer(size_t(n) * sizeof(float), c);
}

#define ST_CURAND_CHECK(call)                                                   \
  do {                                                                          \
    curandStatus_t st_s_ = (call);                                              \
    ST_CHECK(st_s_ == CURAND_STATUS_SUCCESS, #call, " failed: curand status ", int(st_s_)); \
  } while (0)
}  // namespace

struct CudaLlama::Layer {
  CudaParam *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w3, *w2;
};

// One block's activations (bf16 unless noted). Full checkpointing keeps x only.
struct CudaLlama::Acts {
  DeviceBuffer x, xn1, q, k, v, att, lse /*fp32*/, h2, xn2, g, u, a;
  DeviceBuffer rstd1, rstd2;  // fp32
  void drop_all_but_input() {
    DeviceBuffer keep = std::move(x);
    *this = Acts();
    x = std::move(keep);
  }
};

CudaLlama::CudaLlama(const ModelCfg& cfg, AdamWCfg opt, TensorParallel tp)
    : cfg_(cfg), opt_(opt) {
  if (tp.comm && tp.comm->size() > 1) {
    tp_ = tp.comm;
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
    tp_->set_compute_stream(stream());
  }
  ST_USAGE_CHECK(cfg.n_heads > 0 && cfg.d_model % cfg.n_heads == 0 && cfg.n_kv_heads > 0 &&
                     cfg.n_heads % cfg.n_kv_heads == 0,
                 "CudaLlama: bad head counts");
  ST_USAGE_CHECK(cfg.n_heads % tp_size_ == 0 && cfg.n_kv_heads % tp_size_ == 0 &&
                     cfg.ffn_hidden % tp_size_ == 0 && cfg.vocab_size % tp_size_ == 0,
                 "CudaLlama: n_heads, n_kv_heads, ffn_hidden and vocab_size must divide by tp=",
                 tp_size_);
  hq_ = cfg.n_heads / tp_size_;
  hkv_ = cfg.n_kv_heads / tp_size_;
  ffn_ = cfg.ffn_hidden / tp_size_;
  vocab_ = cfg.vocab_size / tp_size_;
  v0_ = vocab_ * tp_rank_;
  // Local shapes: this rank's tp slice (the whole tensor without tp).
  const int64_t d = cfg.d_model, V = vocab_, F = ffn_;
  const int64_t hd = d / cfg.n_heads, qd = hq_ * hd, kd = hkv_ * hd;
  tok_emb_ = add("tok_embeddings.weight", {V, d}, true, -1);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L{};
    L.attn_norm = add(p + "attention_norm.weight", {d}, false, l);
    L.wq = add(p + "attention.wq.weight", {qd, d}, true, l);
    L.wk = add(p + "attention.wk.weight", {kd, d}, true, l);
    L.wv = add(p + "attention.wv.weight", {kd, d}, true, l);
    L.wo = add(p + "attention.wo.weight", {d, qd}, true, l);
    L.ffn_norm = add(p + "ffn_norm.weight", {d}, false, l);
    L.w1 = add(p + "feed_forward.w1.weight", {F, d}, true, l);
    L.w3 = add(p + "feed_forward.w3.weight", {F, d}, true, l);
    L.w2 = add(p + "feed_forward.w2.weight", {d, F}, true, l);
    layers_.push_back(L);
  }
  norm_ = add("norm.weight", {d}, false, cfg.n_layers);
  output_ = add("output.weight", {V, d}, true, cfg.n_layers);
  // One flat gradient buffer; every parameter's slice starts on a 256-byte
  // boundary (cuBLASLt alignment), and a layer's slices are contiguous.
  constexpr int64_t kAlign = 64;  // floats
  layer_range_.assign(size_t(cfg.n_layers) + 2, {0, 0});
  for (auto& p : params_) {
    auto& r = layer_range_[size_t(p->layer + 1)];
    if (r.second == 0) r.first = grads_n_;
    p->g_off = grads_n_;
    grads_n_ += (p->numel + kAlign - 1) / kAlign * kAlign;
    r.second = grads_n_ - r.first;
  }
  grads_ = f32_buf(grads_n_, MemCat::Grads);
  ST_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, size_t(grads_n_) * sizeof(float), stream()));
  for (auto& p : params_) p->g = grads_.as<float>() + p->g_off;
  sumsq_ = f32_buf(2, MemCat::Optim);
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

CudaLlama::~CudaLlama() { cudaStreamSynchronize(stream()); }

CudaParam* CudaLlama::add(const std::string& name, std::vector<int64_t> shape, bool decay,
                          int layer) {
  auto p = std::make_unique<CudaParam>();
  p->name = name;
  p->numel = 1;
  for (int64_t s : shape) p->numel *= s;
  p->shape = std::move(shape);
  p->decay = decay;
  p->layer = layer;
  p->tp_sharded = decay && tp_size_ > 1;  // every weight but the norms is split
  const size_t n32 = size_t(p->numel + 1) * sizeof(float);  // +1: cuRAND normals come in pairs
  p->w = DeviceBuffer(n32, MemCat::Params);
  p->w16 = DeviceBuffer(size_t(p->numel) * sizeof(bf16), MemCat::Params);
  p->m = DeviceBuffer(n32, MemCat::Optim);
  p->v = DeviceBuffer(n32, MemCat::Optim);
  for (DeviceBuffer* b : {&p->w, &p->w16, &p->m, &p->v})
    ST_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), stream()));
  params_.push_back(std::move(p));
  return params_.back().get();
}

int64_t CudaLlama::num_params() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->numel;
  return n;
}

CudaParam& CudaLlama::param(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return *p;
  throw Error("CudaLlama: no parameter named '" + name + "'");
}

void CudaLlama::load_weights(const std::string& name, const std::vector<float>& host) {
  CudaParam& p = param(name);
  ST_CHECK(int64_t(host.size()) == p.numel, "CudaLlama::load_weights ", name, ": ", host.size(),
           " values for ", p.numel, " elements");
  ST_CUDA_CHECK(cudaMemcpyAsync(p.w.data(), host.data(), host.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream()));
  cast_f32_to_bf16(p.w.as<float>(), p.w16.as<bf16>(), p.numel, stream());
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));  // `host` may go away
}

void CudaLlama::init_random(uint64_t seed) {
  curandGenerator_t gen = nullptr;
  ST_CURAND_CHECK(curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  ST_CURAND_CHECK(curandSetStream(gen, stream()));
  ST_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(gen, seed));
  for (const auto& p : params_) {
    if (!p->decay) {  // norm weight
      std::vector<float> ones(size_t(p->numel), 1.f);
      ST_CUDA_CHECK(cudaMemcpyAsync(p->w.data(), ones.data(), ones.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream()));
      ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
    } else {
      const size_t n_even = size_t(p->numel + 1) / 2 * 2;
      ST_CURAND_CHECK(
          curandGenerateNormal(gen, p->w.as<float>(), n_even, 0.f, float(cfg_.init_std)));
    }
    cast_f32_to_bf16(p->w.as<float>(), p->w16.as<bf16>(), p->numel, stream());
  }
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
  curandDestroyGenerator(gen);
}

void CudaLlama::rope_tables(int64_t T) {
  if (T == rope_T_) return;
  const int64_t hd = cfg_.d_model / cfg_.n_heads;
  rope_cos_ = f32_buf(T * hd / 2, MemCat::Other);
  rope_sin_ = f32_buf(T * hd / 2, MemCat::Other);
  rope_table(T, hd, cfg_.rope_theta, 0, rope_cos_.as<float>(), rope_sin_.as<float>(), stream());
  rope_T_ = T;
}

// ---- GEMM helpers (row-major, W [out, in]) ----
namespace {
// y[N, out] = x[N, in] W^T (+ y when beta = 1)
void linear_fwd(GemmLt& g, const bf16* x, const CudaParam& W, int64_t N, float beta, bf16* y,
                cudaStream_t s) {
  const int64_t out = W.shape[0], in = W.shape[1];
  g.gemm(false, true, N, out, in, 1.f, x, in, W.wb(), in, beta, y, out, s);
}
// dW[out, in] += dy^T x  (fp32 accumulate into the gradient)
void linear_bwd_w(GemmLt& g, const bf16* dy, const bf16* x, const CudaParam& W, int64_t N,
                  cudaStream_t s) {
  const int64_t out = W.shape[0], in = W.shape[1];
  g.gemm(true, false, out, in, N, 1.f, dy, out, x, in, 1.f, W.gf(), in, s);
}
// dx[N, in] = dy W (+ dx when beta = 1)
void linear_bwd_x(GemmLt& g, const bf16* dy, const CudaParam& W, int64_t N, float beta, bf16* dx,
                  cudaStream_t s) {
  const int64_t out = W.shape[0], in = W.shape[1];
  g.gemm(false, false, N, in, out, 1.f, dy, out, W.wb(), in, beta, dx, in, s);
}
}  // namespace

void CudaLlama::block_forward(int l, int64_t B, int64_t T, Acts& a, bf16* out) {
  const Layer& P = layers_[size_t(l)];
  const cudaStream_t s = stream();
  const int64_t N = B * T, d = cfg_.d_model, F = ffn_, Hq = hq_, Hkv = hkv_,
                hd = d / cfg_.n_heads;
  const float eps = float(cfg_.norm_eps), scale = 1.f / std::sqrt(float(hd));
  const bf16* x = a.x.as<bf16>();
  // Attention half.
  a.rstd1 = f32_buf(N);
  a.xn1 = bf16_buf(N * d);
  rmsnorm_fwd(x, P.attn_norm->wb(), N, d, eps, a.xn1.as<bf16>(), a.rstd1.as<float>(), s);
  a.q = bf16_buf(N * Hq * hd);
  a.k = bf16_buf(N * Hkv * hd);
  a.v = bf16_buf(N * Hkv * hd);
  linear_fwd(gemm_, a.xn1.as<bf16>(), *P.wq, N, 0.f, a.q.as<bf16>(), s);
  linear_fwd(gemm_, a.xn1.as<bf16>(), *P.wk, N, 0.f, a.k.as<bf16>(), s);
  linear_fwd(gemm_, a.xn1.as<bf16>(), *P.wv, N, 0.f, a.v.as<bf16>(), s);
  rope_fwd(a.q.as<bf16>(), B, T, Hq, hd, rope_cos_.as<float>(), rope_sin_.as<float>(), s);
  rope_fwd(a.k.as<bf16>(), B, T, Hkv, hd, rope_cos_.as<float>(), rope_sin_.as<float>(), s);
  a.att = bf16_buf(N * Hq * hd);
  a.lse = f32_buf(B * Hq * T);
  sdpa_.fwd(a.q.as<bf16>(), a.k.as<bf16>(), a.v.as<bf16>(), B, T, Hq, Hkv, hd, scale,
            a.att.as<bf16>(), a.lse.as<float>(), s);
  a.h2 = bf16_buf(N * d);  // h2 = x + att wo^T (row-parallel: summed over tp)
  ST_CUDA_CHECK(cudaMemcpyAsync(a.h2.data(), x, size_t(N * d) * sizeof(bf16),
                                cudaMemcpyDeviceToDevice, s));
  if (tp_) {
    DeviceBuffer part = bf16_buf(N * d);
    linear_fwd(gemm_, a.att.as<bf16>(), *P.wo, N, 0.f, part.as<bf16>(), s);
    tp_sum(part.as<bf16>(), N * d);
    add_inplace(a.h2.as<bf16>(), part.as<bf16>(), N * d, s);
  } else {
    linear_fwd(gemm_, a.att.as<bf16>(), *P.wo, N, 1.f, a.h2.as<bf16>(), s);
  }
  // MLP half.
  a.rstd2 = f32_buf(N);
  a.xn2 = bf16_buf(N * d);
  rmsnorm_fwd(a.h2.as<bf16>(), P.ffn_norm->wb(), N, d, eps, a.xn2.as<bf16>(), a.rstd2.as<float>(),
              s);
  a.g = bf16_buf(N * F);
  a.u = bf16_buf(N * F);
  linear_fwd(gemm_, a.xn2.as<bf16>(), *P.w1, N, 0.f, a.g.as<bf16>(), s);
  linear_fwd(gemm_, a.xn2.as<bf16>(), *P.w3, N, 0.f, a.u.as<bf16>(), s);
  a.a = bf16_buf(N * F);
  swiglu_fwd(a.g.as<bf16>(), a.u.as<bf16>(), N * F, a.a.as<bf16>(), s);
  if (!out) return;
  ST_CUDA_CHECK(cudaMemcpyAsync(out, a.h2.data(), size_t(N * d) * sizeof(bf16),
                                cudaMemcpyDeviceToDevice, s));
  if (tp_) {
    DeviceBuffer part = bf16_buf(N * d);
    linear_fwd(gemm_, a.a.as<bf16>(), *P.w2, N, 0.f, part.as<bf16>(), s);
    tp_sum(part.as<bf16>(), N * d);
    add_inplace(out, part.as<bf16>(), N * d, s);
  } else {
    linear_fwd(gemm_, a.a.as<bf16>(), *P.w2, N, 1.f, out, s);
  }
}

// dh: on entry d(loss)/d(block output), on return d(loss)/d(block input).
void CudaLlama::block_backward(int l, int64_t B, int64_t T, Acts& a, bf16* dh) {
  const Layer& P = layers_[size_t(l)];
  const cudaStream_t s = stream();
  const int64_t N = B * T, d = cfg_.d_model, F = ffn_, Hq = hq_, Hkv = hkv_,
                hd = d / cfg_.n_heads;
  const float scale = 1.f / std::sqrt(float(hd));
  // MLP half: out = h2 + a w2^T.
  linear_bwd_w(gemm_, dh, a.a.as<bf16>(), *P.w2, N, s);
  a.a = DeviceBuffer();
  {
    DeviceBuffer da = bf16_buf(N * F);
    linear_bwd_x(gemm_, dh, *P.w2, N, 0.f, da.as<bf16>(), s);
    // In place: g, u become dg, du.
    swiglu_bwd(a.g.as<bf16>(), a.u.as<bf16>(), da.as<bf16>(), N * F, a.g.as<bf16>(),
               a.u.as<bf16>(), s);
  }
  linear_bwd_w(gemm_, a.g.as<bf16>(), a.xn2.as<bf16>(), *P.w1, N, s);
  linear_bwd_w(gemm_, a.u.as<bf16>(), a.xn2.as<bf16>(), *P.w3, N, s);
  a.xn2 = DeviceBuffer();
  DeviceBuffer dxn = bf16_buf(N * d);
  linear_bwd_x(gemm_, a.g.as<bf16>(), *P.w1, N, 0.f, dxn.as<bf16>(), s);
  linear_bwd_x(gemm_, a.u.as<bf16>(), *P.w3, N, 1.f, dxn.as<bf16>(), s);
  a.g = DeviceBuffer();
  a.u = DeviceBuffer();
  tp_sum(dxn.as<bf16>(), N * d);  // column-parallel input gradient
  rmsnorm_bwd(a.h2.as<bf16>(), P.ffn_norm->wb(), a.rstd2.as<float>(), dxn.as<bf16>(), N, d, dh,
              P.ffn_norm->gf(), /*accumulate=*/true, s);
  a.h2 = DeviceBuffer();
  // Attention half: h2 = x + att wo^T; dh now holds d/d(h2).
  linear_bwd_w(gemm_, dh, a.att.as<bf16>(), *P.wo, N, s);
  DeviceBuffer datt = bf16_buf(N * Hq * hd);
  linear_bwd_x(gemm_, dh, *P.wo, N, 0.f, datt.as<bf16>(), s);
  DeviceBuffer dq = bf16_buf(N * Hq * hd), dk = bf16_buf(N * Hkv * hd),
               dv = bf16_buf(N * Hkv * hd);
  sdpa_.bwd(a.q.as<bf16>(), a.k.as<bf16>(), a.v.as<bf16>(), a.att.as<bf16>(), a.lse.as<float>(),
            datt.as<bf16>(), B, T, Hq, Hkv, hd, scale, dq.as<bf16>(), dk.as<bf16>(),
            dv.as<bf16>(), s);
  datt = DeviceBuffer();
  rope_bwd(dq.as<bf16>(), B, T, Hq, hd, rope_cos_.as<float>(), rope_sin_.as<float>(), s);
  rope_bwd(dk.as<bf16>(), B, T, Hkv, hd, rope_cos_.as<float>(), rope_sin_.as<float>(), s);
  linear_bwd_w(gemm_, dq.as<bf16>(), a.xn1.as<bf16>(), *P.wq, N, s);
  linear_bwd_w(gemm_, dk.as<bf16>(), a.xn1.as<bf16>(), *P.wk, N, s);
  linear_bwd_w(gemm_, dv.as<bf16>(), a.xn1.as<bf16>(), *P.wv, N, s);
  linear_bwd_x(gemm_, dq.as<bf16>(), *P.wq, N, 0.f, dxn.as<bf16>(), s);
  linear_bwd_x(gemm_, dk.as<bf16>(), *P.wk, N, 1.f, dxn.as<bf16>(), s);
  linear_bwd_x(gemm_, dv.as<bf16>(), *P.wv, N, 1.f, dxn.as<bf16>(), s);
  tp_sum(dxn.as<bf16>(), N * d);
  rmsnorm_bwd(a.x.as<bf16>(), P.attn_norm->wb(), a.rstd1.as<float>(), dxn.as<bf16>(), N, d, dh,
              P.attn_norm->gf(), /*accumulate=*/true, s);
  a = Acts();
}

float CudaLlama::step_forward_backward(const int32_t* tokens, const int32_t* targets, int B,
                                       int T, bool full_act_ckpt) {
  times_ = StepTimes();
  const float loss = forward_backward(tokens, targets, B, T, full_act_ckpt, /*zero_grads=*/true,
                                      1.f, GradsReadyFn());
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return loss;
}

float CudaLlama::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                                  bool full_act_ckpt, bool zero_grads, float grad_scale,
                                  const GradsReadyFn& ready) {
  ST_USAGE_CHECK(B >= 1 && T >= 1, "CudaLlama: batch must be at least 1x1, got B=", B, " T=", T);
  const cudaStream_t s = stream();
  const int64_t N = int64_t(B) * T, d = cfg_.d_model, V = vocab_;
  const float eps = float(cfg_.norm_eps);
  sumsq_valid_ = false;
  if (zero_grads)
    ST_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, size_t(grads_n_) * sizeof(float), s));
  DeviceBuffer tok(size_t(N) * 4, MemCat::Other), tgt(size_t(N) * 4, MemCat::Other);
  ST_CUDA_CHECK(cudaMemcpyAsync(tok.data(), tokens, size_t(N) * 4, cudaMemcpyHostToDevice, s));
  ST_CUDA_CHECK(cudaMemcpyAsync(tgt.data(), targets, size_t(N) * 4, cudaMemcpyHostToDevice, s));
  rope_tables(T);

  // ---- forward ----
  t_fwd_.start(s);
  std::vector<Acts> acts(size_t(cfg_.n_layers));
  DeviceBuffer h = bf16_buf(N * d);
  {
    st::cuda::NvtxRange r("forward");
    if (tp_) {  // vocab-parallel: each rank fills the rows it owns
      embedding_fwd_shard(tok.as<int32_t>(), N, tok_emb_->wb(), v0_, V, d, h.as<bf16>(), s);
      tp_sum(h.as<bf16>(), N * d);
    } else {
      embedding_fwd(tok.as<int32_t>(), N, tok_emb_->wb(), V, d, h.as<bf16>(), s);
    }
    for (int l = 0; l < cfg_.n_layers; ++l) {
      Acts& a = acts[size_t(l)];
      a.x = std::move(h);
      h = bf16_buf(N * d);
      block_forward(l, B, T, a, h.as<bf16>());
      if (full_act_ckpt) a.drop_all_but_input();
    }
  }
  DeviceBuffer rstd = f32_buf(N), xn = bf16_buf(N * d), logits = bf16_buf(N * V);
  rmsnorm_fwd(h.as<bf16>(), norm_->wb(), N, d, eps, xn.as<bf16>(), rstd.as<float>(), s);
  linear_fwd(gemm_, xn.as<bf16>(), *output_, N, 0.f, logits.as<bf16>(), s);
  DeviceBuffer lse = f32_buf(N), row_loss = f32_buf(N);
  loss_fwd(logits.as<bf16>(), tgt.as<int32_t>(), N, lse.as<float>(), row_loss.as<float>());
  t_fwd_.stop(s);
  int64_t n_valid = 0;
  const float loss = cross_entropy_loss(row_loss.as<float>(), tgt.as<int32_t>(), N, &n_valid, s);
  // The stream is idle here: this forward and any earlier backward are done.
  times_.fwd_s += t_fwd_.seconds();
  if (bwd_pending_) times_.bwd_s += t_bwd_.seconds();
  bwd_pending_ = false;

  // ---- backward ----
  st::cuda::NvtxRange r("backward");
  t_bwd_.start(s);
  cross_entropy_bwd(logits.as<bf16>(), tgt.as<int32_t>(), lse.as<float>(), N, V, v0_, n_valid,
                    grad_scale, logits.as<bf16>(), s);
  linear_bwd_w(gemm_, logits.as<bf16>(), xn.as<bf16>(), *output_, N, s);
  DeviceBuffer dxn = bf16_buf(N * d);
  linear_bwd_x(gemm_, logits.as<bf16>(), *output_, N, 0.f, dxn.as<bf16>(), s);
  tp_sum(dxn.as<bf16>(), N * d);  // vocab-parallel head: partial over tp
  logits = DeviceBuffer();
  DeviceBuffer dh = bf16_buf(N * d);
  rmsnorm_bwd(h.as<bf16>(), norm_->wb(), rstd.as<float>(), dxn.as<bf16>(), N, d, dh.as<bf16>(),
              norm_->gf(), /*accumulate=*/false, s);
  if (ready) ready(cfg_.n_layers);
  h = DeviceBuffer();
  dxn = DeviceBuffer();
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    Acts& a = acts[size_t(l)];
    if (full_act_ckpt) block_forward(l, B, T, a, nullptr);  // recompute
    block_backward(l, B, T, a, dh.as<bf16>());
    if (ready) ready(l);
  }
  if (tp_)
    embedding_bwd_shard(tok.as<int32_t>(), N, dh.as<bf16>(), v0_, V, d, tok_emb_->gf(), s);
  else
    embedding_bwd(tok.as<int32_t>(), N, dh.as<bf16>(), V, d, tok_emb_->gf(), s);
  if (ready) ready(-1);
  t_bwd_.stop(s);
  bwd_pending_ = true;
  return loss;
}

std::pair<int64_t, int64_t> CudaLlama::layer_grad_range(int layer) const {
  ST_CHECK(layer >= -1 && layer <= cfg_.n_layers, "CudaLlama: no layer ", layer);
  return layer_range_[size_t(layer + 1)];
}

double CudaLlama::grad_sumsq() {
  const cudaStream_t s = stream();
  if (!tp_) {
    std::vector<const float*> grads;
    std::vector<int64_t> sizes;
    for (const auto& p : params_) {
      grads.push_back(p->gf());
      sizes.push_back(p->numel);
    }
    multi_tensor_sumsq(grads, sizes, sumsq_.as<float>(), s);
    float h = 0.f;
    ST_CUDA_CHECK(cudaMemcpyAsync(&h, sumsq_.data(), sizeof h, cudaMemcpyDeviceToHost, s));
    ST_CUDA_CHECK(cudaStreamSynchronize(s));
    sumsq_valid_ = true;
    return double(h);
  }
  // Tensor parallelism: slices summed over tp, replicated tensors once.
  std::vector<const float*> g[2];
  std::vector<int64_t> n[2];
  for (const auto& p : params_) {
    g[p->tp_sharded ? 0 : 1].push_back(p->gf());
    n[p->tp_sharded ? 0 : 1].push_back(p->numel);
  }
  float* sq = sumsq_.as<float>();
  for (int k = 0; k < 2; ++k) multi_tensor_sumsq(g[k], n[k], sq + k, s);
  tp_sum(sq, 1);
  float h[2] = {0.f, 0.f};
  ST_CUDA_CHECK(cudaMemcpyAsync(h, sq, sizeof h, cudaMemcpyDeviceToHost, s));
  ST_CUDA_CHECK(cudaStreamSynchronize(s));
  const float total = h[0] + h[1];
  ST_CUDA_CHECK(cudaMemcpyAsync(sq, &total, sizeof total, cudaMemcpyHostToDevice, s));
  ST_CUDA_CHECK(cudaStreamSynchronize(s));  // `total` is on this stack
  sumsq_valid_ = true;
  return double(total);
}

void CudaLlama::tp_sum(bf16* x, int64_t n) {
  if (!tp_) return;
  tp_->all_reduce_sum_typed(x, n, CommDType::BF16);
  tp_->wait_on(stream());
}
void CudaLlama::tp_sum(float* x, int64_t n) {
  if (!tp_) return;
  tp_->all_reduce_sum_typed(x, n, CommDType::F32);
  tp_->wait_on(stream());
}

// Mean-loss statistics per row: lse and row_loss. Vocab-parallel: the row
// max, then the rescaled sum of exponentials and the target logit, reduced
// over tp (Megatron's cross-entropy; the logits are never gathered).
void CudaLlama::loss_fwd(const bf16* logits, const int32_t* tgt, int64_t N, float* lse,
                         float* row_loss) {
  const cudaStream_t s = stream();
  if (!tp_) {
    cross_entropy_fwd(logits, tgt, N, vocab_, lse, row_loss, s);
    return;
  }
  DeviceBuffer mx = f32_buf(N), gmax = f32_buf(N), sumexp = f32_buf(N), tl = f32_buf(N);
  cross_entropy_vp_partial(logits, tgt, N, vocab_, v0_, mx.as<float>(), sumexp.as<float>(),
                           tl.as<float>(), s);
  ST_CUDA_CHECK(cudaMemcpyAsync(gmax.data(), mx.data(), size_t(N) * sizeof(float),
                                cudaMemcpyDeviceToDevice, s));
  tp_->all_reduce_max_typed(gmax.data(), N, CommDType::F32);
  tp_->wait_on(s);
  cross_entropy_vp_rescale(mx.as<float>(), gmax.as<float>(), sumexp.as<float>(), N, s);
  tp_sum(sumexp.as<float>(), N);
  tp_sum(tl.as<float>(), N);
  cross_entropy_vp_finish(gmax.as<float>(), sumexp.as<float>(), tl.as<float>(), tgt, N, lse,
                          row_loss, s);
}

void CudaLlama::optimizer_step(float lr, float clip, int64_t t) {
  const cudaStream_t s = stream();
  st::cuda::NvtxRange r("optimizer");
  t_opt_.start(s);
  ++step_;
  if (t <= 0) t = step_;
  std::vector<const float*> grads;
  std::vector<int64_t> sizes;
  std::vector<AdamWTensor> ts;
  for (const auto& p : params_) {
    grads.push_back(p->gf());
    sizes.push_back(p->numel);
    AdamWTensor a;
    a.w = p->w.as<float>();
    a.g = p->gf();
    a.m = p->m.as<float>();
    a.v = p->v.as<float>();
    a.w_bf16 = p->w16.as<bf16>();
    a.n = p->numel;
    a.weight_decay = p->decay ? opt_.weight_decay : 0.f;
    ts.push_back(a);
  }
  const bool do_clip = clip > 0;
  if (do_clip && !sumsq_valid_) {
    if (tp_)
      grad_sumsq();  // needs the tp reduction (and a host round trip)
    else
      multi_tensor_sumsq(grads, sizes, sumsq_.as<float>(), s);
  }
  adamw_multi(ts, lr, opt_.beta1, opt_.beta2, opt_.eps, t,
              do_clip ? sumsq_.as<float>() : nullptr, clip, s);
  t_opt_.stop(s);
  opt_pending_ = true;
}

void CudaLlama::state_to_host(const CudaParam& p, float* w, float* m, float* v,
                              st::cuda::CopyStream& copy) const {
  const size_t bytes = size_t(p.numel) * sizeof(float);
  if (w) copy.copy_to_host(w, p.w.data(), bytes, stream());
  if (m) copy.copy_to_host(m, p.m.data(), bytes, stream());
  if (v) copy.copy_to_host(v, p.v.data(), bytes, stream());
}

void CudaLlama::state_from_host(CudaParam& p, const float* w, const float* m, const float* v) {
  const size_t bytes = size_t(p.numel) * sizeof(float);
  const cudaStream_t s = stream();
  if (w) {
    ST_CUDA_CHECK(cudaMemcpyAsync(p.w.data(), w, bytes, cudaMemcpyHostToDevice, s));
    cast_f32_to_bf16(p.w.as<float>(), p.w16.as<bf16>(), p.numel, s);
  }
  if (m) ST_CUDA_CHECK(cudaMemcpyAsync(p.m.data(), m, bytes, cudaMemcpyHostToDevice, s));
  if (v) ST_CUDA_CHECK(cudaMemcpyAsync(p.v.data(), v, bytes, cudaMemcpyHostToDevice, s));
  ST_CUDA_CHECK(cudaStreamSynchronize(s));  // the host buffers may go away
}

std::vector<float> CudaLlama::copy_grads_to_host(const std::string& name) const {
  const CudaParam& p = param(name);
  std::vector<float> h(size_t(p.numel));
  ST_CUDA_CHECK(cudaMemcpyAsync(h.data(), p.g, h.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, stream()));
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return h;
}

std::vector<float> CudaLlama::copy_weights_to_host(const std::string& name) const {
  const CudaParam& p = param(name);
  std::vector<float> h(size_t(p.numel));
  ST_CUDA_CHECK(cudaMemcpyAsync(h.data(), p.w.data(), h.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, stream()));
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return h;
}

const StepTimes& CudaLlama::last_times() const {
  ST_CUDA_CHECK(cudaStreamSynchronize(stream()));
  if (bwd_pending_) times_.bwd_s += t_bwd_.seconds();
  bwd_pending_ = false;
  if (opt_pending_) times_.opt_s = t_opt_.seconds();
  opt_pending_ = false;
  return times_;
}

void CudaLlama::reset_times() {
  last_times();
  times_ = StepTimes();
}

int64_t CudaLlama::peak_device_bytes() const {
  return st::cuda::DeviceAllocator::instance().stats().in_use_peak;
}

}  // namespace st::kernels::cuda
