// Implementation of op_runner.hpp: one harness per op kind that sets up
// inputs of the op's shape and calls the kernel the trainer calls
// (lib/model's block.cpp, stage.cpp and ring_attention.cpp; Ops::adamw).
#include "planner/op_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <thread>

#include "core/phase_clock.hpp"
#include "core/util.hpp"
#include "kernels/ops.hpp"
#include "model/model.hpp"
#include "tensor/device.hpp"
#include "tensor/tensor.hpp"

namespace st::plan {
namespace {

std::vector<float> filled(int64_t n, float scale = 0.1f) {
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  std::mt19937 g(1234);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto& x : v) x = u(g);
  return v;
}

// Every harness runs the kernels in fp32.
constexpr DType kF32 = DType::F32;

// A GEMM of the op's m x n x k and transposes (beta 1 for a weight gradient).
std::function<void()> gemm_call(const Op& op, Ops& o, Stream& st) {
  const int64_t* s = op.s;
  const int64_t m = s[0], n = s[1], kk = s[2];
  auto A = std::make_shared<std::vector<float>>(filled(m * kk));
  auto B = std::make_shared<std::vector<float>>(filled(kk * n));
  auto C = std::make_shared<std::vector<float>>(filled(m * n));
  const bool ta = op.ta, tb = op.tb;
  const float beta = ta ? 1.f : 0.f;  // weight gradients accumulate (linear_bwd_w)
  const int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
  return [=, &o, &st] {
    o.gemm(st, ta, tb, m, n, kk, 1.f, A->data(), lda, B->data(), ldb, kF32, beta, C->data(), n,
           kF32);
  };
}

// Causal attention forward or backward; at cp > 1, cp rank 0's share of the
// ring (its own block, then cp-1 others, merged).
std::function<void()> attention_call(const Op& op, Ops& o, Stream& st) {
  const int64_t* s = op.s;
  const int64_t B = s[0], T = s[1], Hq = s[2], Hkv = s[3], hd = s[4];
  const int cp = int(s[5]);
  const float scale = 1.f / std::sqrt(float(hd));
  auto q = std::make_shared<std::vector<float>>(filled(B * T * Hq * hd, 1.f));
  auto kv = std::make_shared<std::vector<float>>(filled(2 * B * T * Hkv * hd, 1.f));
  auto out = std::make_shared<std::vector<float>>(filled(B * T * Hq * hd));
  auto lse = std::make_shared<std::vector<float>>(filled(B * Hq * T));
  auto ob = std::make_shared<std::vector<float>>(filled(B * T * Hq * hd));
  auto lb = std::make_shared<std::vector<float>>(filled(B * Hq * T));
  auto dq = std::make_shared<std::vector<float>>(filled(B * T * Hq * hd));
  auto dkv = std::make_shared<std::vector<float>>(filled(2 * B * T * Hkv * hd));
  const int64_t nk = B * T * Hkv * hd;
  // Forward once so backward sees a consistent (out, lse).
  if (cp == 1)
    o.attention_fwd(st, q->data(), kv->data(), kv->data() + nk, B, T, Hq, Hkv, hd, scale,
                    out->data(), lse->data(), kF32);
  auto qpos = std::make_shared<std::vector<int32_t>>(cp_positions(0, cp, T * cp));
  auto kpos = std::make_shared<std::vector<std::vector<int32_t>>>();
  for (int j = 0; j < cp; ++j) kpos->push_back(cp_positions((cp - j) % cp, cp, T * cp));
  const bool fwd = op.kind == OpKind::AttnFwd;
  return [=, &o, &st] {
    if (cp == 1) {
      if (fwd)
        o.attention_fwd(st, q->data(), kv->data(), kv->data() + nk, B, T, Hq, Hkv, hd, scale,
                        out->data(), lse->data(), kF32);
      else
        o.attention_bwd(st, q->data(), kv->data(), kv->data() + nk, out->data(), lse->data(),
                        ob->data(), B, T, Hq, Hkv, hd, scale, dq->data(), dkv->data(),
                        dkv->data() + nk, kF32);
      return;
    }
    // cp rank 0's share of the ring: its own block, then cp-1 others.
    for (int j = 0; j < cp; ++j) {
      const int32_t* kp = (*kpos)[size_t(j)].data();
      if (fwd) {
        float* dst = j == 0 ? out->data() : ob->data();
        float* l = j == 0 ? lse->data() : lb->data();
        o.attention_fwd_block(st, q->data(), kv->data(), kv->data() + nk, B, T, T, Hq, Hkv, hd,
                              scale, qpos->data(), kp, dst, l, kF32);
        if (j > 0)
          o.attention_lse_merge(st, out->data(), lse->data(), ob->data(), lb->data(), B, T, Hq, hd,
                                kF32);
      } else {
        o.attention_bwd_block(st, q->data(), kv->data(), kv->data() + nk, out->data(), lse->data(),
                              ob->data(), B, T, T, Hq, Hkv, hd, scale, qpos->data(), kp, dq->data(),
                              dkv->data(), dkv->data() + nk, kF32);
      }
    }
  };
}

// RMSNorm forward or backward over rows x d.
std::function<void()> norm_call(const Op& op, Ops& o, Stream& st) {
  const int64_t* s = op.s;
  const int64_t rows = s[0], d = s[1];
  auto x = std::make_shared<std::vector<float>>(filled(rows * d, 1.f));
  auto w = std::make_shared<std::vector<float>>(filled(d, 1.f));
  auto y = std::make_shared<std::vector<float>>(filled(rows * d));
  auto dx = std::make_shared<std::vector<float>>(filled(rows * d));
  auto dw = std::make_shared<std::vector<float>>(filled(d));
  auto rstd = std::make_shared<std::vector<float>>(filled(rows, 1.f));
  if (op.kind == OpKind::NormFwd)
    return [=, &o, &st] {
      o.rmsnorm_fwd(st, x->data(), w->data(), rows, d, 1e-5f, y->data(), rstd->data(), kF32);
    };
  return [=, &o, &st] {
    o.rmsnorm_bwd(st, x->data(), w->data(), rstd->data(), y->data(), rows, d, dx->data(),
                  dw->data(), true, kF32);
  };
}

// RoPE (the inverse rotation for backward) over rows x heads x head_dim.
std::function<void()> rope_call(const Op& op, Ops& o, Stream& st) {
  const int64_t* s = op.s;
  const int64_t rows = s[0], H = s[1], hd = s[2];
  auto x = std::make_shared<std::vector<float>>(filled(rows * H * hd));
  auto c = std::make_shared<std::vector<float>>(size_t(rows * hd / 2));
  auto sn = std::make_shared<std::vector<float>>(size_t(rows * hd / 2));
  std::vector<int32_t> pos(static_cast<size_t>(rows), 0);
  for (int64_t t = 0; t < rows; ++t) pos[size_t(t)] = int32_t(t);
  rope_tables(pos.data(), rows, hd, 10000.0, c->data(), sn->data());
  const bool inverse = op.kind == OpKind::RopeBwd;
  return
      [=, &o, &st] { o.rope(st, x->data(), 1, rows, H, hd, c->data(), sn->data(), inverse, kF32); };
}

// SwiGLU forward or backward over n elements.
std::function<void()> swiglu_call(const Op& op, Ops& o, Stream& st) {
  const int64_t n = op.s[0];
  auto g = std::make_shared<std::vector<float>>(filled(n));
  auto u = std::make_shared<std::vector<float>>(filled(n));
  auto out = std::make_shared<std::vector<float>>(filled(n));
  auto dg = std::make_shared<std::vector<float>>(filled(n));
  auto du = std::make_shared<std::vector<float>>(filled(n));
  if (op.kind == OpKind::SwigluFwd)
    return [=, &o, &st] { o.swiglu_fwd(st, g->data(), u->data(), n, out->data(), kF32); };
  return [=, &o, &st] {
    o.swiglu_bwd(st, g->data(), u->data(), out->data(), n, dg->data(), du->data(), kF32);
  };
}

// An elementwise add (the kernel) or a copy (memcpy) of n elements.
std::function<void()> add_or_copy_call(const Op& op, Ops& o, Stream& st) {
  const int64_t n = op.s[0];
  auto x = std::make_shared<std::vector<float>>(filled(n));
  auto y = std::make_shared<std::vector<float>>(filled(n));
  if (op.kind == OpKind::Add) return [=, &o, &st] { o.add(st, y->data(), x->data(), n, kF32); };
  return [=] { std::memcpy(y->data(), x->data(), size_t(n) * sizeof(float)); };
}

// Cross-entropy over rows x vocabulary: forward (partial, then finish) or
// backward (after one forward).
std::function<void()> cross_entropy_call(const Op& op, Ops& o, Stream& st) {
  const int64_t* s = op.s;
  const int64_t rows = s[0], V = s[1];
  auto logits = std::make_shared<std::vector<float>>(filled(rows * V, 1.f));
  auto dl = std::make_shared<std::vector<float>>(filled(rows * V));
  auto mx = std::make_shared<std::vector<float>>(filled(rows));
  auto se = std::make_shared<std::vector<float>>(filled(rows));
  auto tl = std::make_shared<std::vector<float>>(filled(rows));
  auto lse = std::make_shared<std::vector<float>>(filled(rows));
  auto loss = std::make_shared<std::vector<float>>(filled(rows));
  auto tg = std::make_shared<std::vector<int32_t>>(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) (*tg)[size_t(r)] = int32_t(r % V);
  auto fwd = [=, &o, &st] {
    o.ce_partial(st, logits->data(), tg->data(), rows, V, 0, mx->data(), se->data(), tl->data(),
                 kF32);
    o.ce_finish(st, mx->data(), se->data(), tl->data(), tg->data(), rows, lse->data(),
                loss->data());
  };
  fwd();
  if (op.kind == OpKind::CeFwd) return fwd;
  return [=, &o, &st] {
    o.ce_bwd(st, logits->data(), tg->data(), lse->data(), rows, V, 0, 1.f, dl->data(), kF32);
  };
}

// The embedding's gather (forward) or scatter-add (backward) of rows tokens.
std::function<void()> embedding_call(const Op& op, Ops& o, Stream& st) {
  const int64_t* s = op.s;
  const int64_t rows = s[0], d = s[1], vocab = 256;
  auto table = std::make_shared<std::vector<float>>(filled(vocab * d));
  auto x = std::make_shared<std::vector<float>>(filled(rows * d));
  auto tok = std::make_shared<std::vector<int32_t>>(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) (*tok)[size_t(r)] = int32_t((r * 7) % vocab);
  if (op.kind == OpKind::EmbedFwd)
    return [=, &o, &st] {
      o.embedding_fwd(st, tok->data(), rows, table->data(), 0, vocab, d, x->data(), kF32);
    };
  return [=, &o, &st] {
    o.embedding_bwd(st, tok->data(), rows, x->data(), 0, vocab, d, table->data(), kF32);
  };
}

// One AdamW step over n parameters (the step count advancing each call).
std::function<void()> adamw_call(const Op& op, Ops& o, Stream& st) {
  const int64_t n = op.s[0];
  auto w = std::make_shared<std::vector<float>>(filled(n));
  auto g = std::make_shared<std::vector<float>>(filled(n));
  auto m = std::make_shared<std::vector<float>>(size_t(n), 0.f);
  auto v = std::make_shared<std::vector<float>>(size_t(n), 0.f);
  auto t = std::make_shared<int64_t>(0);
  return [=, &o, &st] {
    AdamWSpan sp;
    sp.w = w->data(), sp.g = g->data(), sp.m = m->data(), sp.v = v->data(), sp.n = n;
    sp.wc = nullptr;
    AdamWHyper h;
    h.lr = 1e-4f, h.weight_decay = 0.1f, h.step = ++*t;
    o.adamw(st, {sp}, h);
  };
}

// The call for one op, with its buffers captured: the CPU backend's Ops
// (kernels/ops.hpp) in fp32 on the default CPU device's inline stream, as
// lib/model calls them.
std::function<void()> harness(const Op& op) {
  Ops& o = cpu_ops();
  Stream& st = cpu_device().compute_stream();
  switch (op.kind) {
    case OpKind::Gemm:
      return gemm_call(op, o, st);
    case OpKind::AttnFwd:
    case OpKind::AttnBwd:
      return attention_call(op, o, st);
    case OpKind::NormFwd:
    case OpKind::NormBwd:
      return norm_call(op, o, st);
    case OpKind::RopeFwd:
    case OpKind::RopeBwd:
      return rope_call(op, o, st);
    case OpKind::SwigluFwd:
    case OpKind::SwigluBwd:
      return swiglu_call(op, o, st);
    case OpKind::Add:
    case OpKind::Copy:
      return add_or_copy_call(op, o, st);
    case OpKind::CeFwd:
    case OpKind::CeBwd:
      return cross_entropy_call(op, o, st);
    case OpKind::EmbedFwd:
    case OpKind::EmbedBwd:
      return embedding_call(op, o, st);
    case OpKind::Alloc: {
      const int64_t n = op.s[0];
      return [n] { Tensor t({n}, MemCat::Activations); };  // allocate, fill, free
    }
    case OpKind::Adam:
      return adamw_call(op, o, st);
  }
  return [] {};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median (fastest with `fastest`) wall seconds of one call; its median CPU
// seconds into *cpu when given.
double time_calls(const std::function<void()>& f0, double min_seconds, bool fastest = false,
                  double* cpu = nullptr) {
  Stream& st = cpu_device().compute_stream();
  auto f = [&] {
    f0();
    st.synchronize();
  };
  f();  // warm-up: first touch of the buffers, library set-up
  std::vector<double> t, c;
  const double end = wall_time() + min_seconds;
  while (t.size() < 3 || wall_time() < end) {
    const double c0 = cpu ? process_cpu_seconds() : 0;
    const double t0 = wall_time();
    f();
    t.push_back(wall_time() - t0);
    if (cpu) c.push_back(process_cpu_seconds() - c0);
    if (t.size() > 100000) break;
  }
  if (cpu) *cpu = median(c);
  return fastest ? *std::min_element(t.begin(), t.end()) : median(t);
}
// Mean wall seconds of one call of `f` over back-to-back calls filling at
// least `window` seconds (at least one call).
double mean_seconds(const std::function<void()>& f, double window) {
  const double t0 = wall_time();
  long n = 0;
  double t = 0;
  do {
    f();
    ++n;
    t = wall_time() - t0;
  } while (t < window);
  return t / double(n);
}
}  // namespace

// Copies of an op's buffers to cycle through, so that together they exceed
// the last-level cache (kColdBytes): in a training step every block's
// activations are other memory, read from DRAM, not the hot buffers of a
// loop that repeats one call.
constexpr double kColdBytes = 96.0 * (1 << 20);

double time_op(const Op& op, double min_seconds, bool fastest, double* cpu_seconds) {
  if (fastest) return time_calls(harness(op), min_seconds, true, cpu_seconds);  // hot: a peak
  const double bytes = std::max(1.0, op.elements() * 4);
  const int n = int(std::clamp(std::ceil(kColdBytes / bytes), 1.0, 32.0));
  std::vector<std::function<void()>> copies;
  for (int i = 0; i < n; ++i) copies.push_back(harness(op));
  size_t k = 0;
  return time_calls([&] { copies[k++ % copies.size()](); }, min_seconds, false, cpu_seconds);
}

double time_ops_pass(const std::vector<Op>& ops, double min_seconds) {
  std::vector<std::function<void()>> fs;
  for (const Op& o : ops) fs.push_back(harness(o));
  Stream& st = cpu_device().compute_stream();
  auto pass = [&] {
    for (auto& f : fs) f();
    st.synchronize();
  };
  pass();  // warm-up
  return mean_seconds(pass, min_seconds);
}

namespace {
// The hot call of sustained_slowdown and compute_until: a 256^3 sgemm.
Op hot_gemm() {
  Op g;
  g.kind = OpKind::Gemm;
  g.s[0] = g.s[1] = g.s[2] = 256;
  return g;
}
}  // namespace

double sustained_slowdown(double seconds) {
  const std::function<void()> f0 = harness(hot_gemm());
  Stream& st = cpu_device().compute_stream();
  auto call = [&] {
    f0();
    st.synchronize();
  };
  call();  // warm-up
  auto per_call = [&](double window) { return mean_seconds(call, window); };
  std::vector<double> burst;
  for (int k = 0; k < 8; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // the quota refills
    burst.push_back(per_call(0.005));
  }
  const double sustained = per_call(seconds);
  return sustained / median(burst);
}

void compute_until(const std::atomic<bool>& stop) {
  const std::function<void()> f = harness(hot_gemm());
  while (!stop.load(std::memory_order_relaxed)) f();
}

}  // namespace st::plan
