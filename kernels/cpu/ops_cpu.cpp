// The CPU backend's Ops (kernels/ops.hpp) over the fp32 kernels of
// cpu_kernels.hpp. Every op is enqueued on its stream (run at once on the
// default CPU device, on the stream's worker thread on the strict one).
// bf16 GEMMs multiply bf16 directly with fp32 accumulation (oneDNN where the
// CPU has bf16 instructions, gemm_bf16). The other ops widen bf16 operands
// to fp32 scratch before the kernel; every output is rounded to bf16 once,
// when stored: the rounding points of the CUDA kernels, so
// train.precision=bf16 on CPU ranks exercises the numbers a GPU run produces.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "core/util.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/ops.hpp"

namespace st {
namespace k = kernels;
namespace {

bool is_bf16(DType t) { return t == DType::BF16; }

// Scratch for widened operands, reused per thread: a fresh std::vector of a
// large tensor is a fresh mmap whose every page faults on first touch, on
// every call; a kept buffer is warm from the second step on.
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    auto& pool = free_list();
    if (!pool.empty()) {
      buf_ = std::move(pool.back());
      pool.pop_back();
    }
    if (buf_.size() < size_t(n)) buf_.resize(size_t(n));
  }
  ~Scratch() { free_list().push_back(std::move(buf_)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() { return buf_.data(); }

 private:
  static std::vector<std::vector<float>>& free_list() {
    thread_local std::vector<std::vector<float>> pool;
    return pool;
  }
  std::vector<float> buf_;
};

void widen(const void* x, DType t, int64_t n, float* out) {
  if (t == DType::F32) {
    std::memcpy(out, x, size_t(n) * sizeof(float));
    return;
  }
  k::widen_bf16(static_cast<const uint16_t*>(x), n, out);
}

void narrow(const float* x, int64_t n, void* out, DType t) {
  if (t == DType::F32) {
    if (out != x) std::memcpy(out, x, size_t(n) * sizeof(float));
    return;
  }
  k::narrow_bf16(x, n, static_cast<uint16_t*>(out));
}

// An input as fp32: the pointer itself for fp32, a widened copy for bf16.
class In {
 public:
  In(const void* x, int64_t n, DType t) {
    if (!is_bf16(t)) {
      p_ = static_cast<const float*>(x);
      return;
    }
    buf_.emplace(n);
    widen(x, t, n, buf_->data());
    p_ = buf_->data();
  }
  const float* get() const { return p_; }

 private:
  const float* p_ = nullptr;
  std::optional<Scratch> buf_;
};

// An output as fp32: written in place for fp32; for bf16 a scratch that is
// rounded into the destination by store(). `load` first widens the current
// contents (accumulating and in-place ops).
class Out {
 public:
  Out(void* x, int64_t n, DType t, bool load) : x_(x), n_(n), t_(t) {
    if (!is_bf16(t)) {
      p_ = static_cast<float*>(x);
      return;
    }
    buf_.emplace(n);
    if (load) widen(x, t, n, buf_->data());
    p_ = buf_->data();
  }
  float* get() { return p_; }
  void store() {
    if (is_bf16(t_)) narrow(p_, n_, x_, t_);
  }

 private:
  void* x_;
  int64_t n_;
  DType t_;
  float* p_ = nullptr;
  std::optional<Scratch> buf_;
};

// Wall seconds per kind of kernel, added by whichever thread runs the work.
enum Kind { kGemm, kAttention, kElementwise, kOptimizer, kKinds };
std::atomic<double> g_seconds[kKinds];

void add_seconds(Kind k, double s) {
  double cur = g_seconds[k].load();
  while (!g_seconds[k].compare_exchange_weak(cur, cur + s)) {
  }
}

// Runs fn in stream order and times it as kind k.
template <typename F>
void run(Stream& s, Kind k, F&& fn) {
  s.enqueue([k, fn = std::forward<F>(fn)]() mutable {
    const double t0 = wall_time();
    fn();
    add_seconds(k, wall_time() - t0);
  });
}

class CpuOps final : public Ops {
 public:
  KernelSeconds take_kernel_seconds() override {
    KernelSeconds r;
    r.gemm = g_seconds[kGemm].exchange(0.0);
    r.attention = g_seconds[kAttention].exchange(0.0);
    r.elementwise = g_seconds[kElementwise].exchange(0.0);
    r.optimizer = g_seconds[kOptimizer].exchange(0.0);
    r.known = true;
    return r;
  }
  // What ran, counted per call (kernels/ops.hpp, OpPaths).
  OpPaths take_paths() override {
    std::lock_guard<std::mutex> g(paths_mu_);
    OpPaths r = std::move(paths_);
    paths_ = OpPaths{};
    r.known = true;
    return r;
  }
  std::string describe() const override {
    return "CPU: fp32 GEMM " + k::gemm_library() + "; bf16 GEMM " + k::gemm_bf16_library() +
           "; bf16 stored, fp32 math";
  }

  void gemm(Stream& s, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, DType ab, float beta, void* C,
            int64_t ldc, DType c) override {
    ST_CHECK(c == DType::F32 || c == ab, "gemm: output dtype ", dtype_name(c), " for ",
             dtype_name(ab), " inputs");
    tally(paths_.gemm, is_bf16(ab) ? "cpu_bf16" : "cpu_fp32");
    run(s, kGemm, [=] {
      if (!is_bf16(ab)) {
        k::gemm(ta, tb, M, N, K, alpha, static_cast<const float*>(A), lda,
                static_cast<const float*>(B), ldb, beta, static_cast<float*>(C), ldc);
        return;
      }
      k::gemm_bf16(ta, tb, M, N, K, alpha, static_cast<const uint16_t*>(A), lda,
                   static_cast<const uint16_t*>(B), ldb, beta, C, ldc, c == DType::BF16);
    });
  }

  void cast(Stream& s, const void* x, DType xt, void* y, DType yt, int64_t n) override {
    ST_CHECK(xt != DType::I32 && yt != DType::I32, "cast: int32 is not a float type");
    run(s, kElementwise, [=] {
      if (xt == yt) {
        if (x != y) std::memcpy(y, x, size_t(n) * dtype_size(xt));
      } else if (xt == DType::F32) {
        narrow(static_cast<const float*>(x), n, y, yt);
      } else {
        widen(x, xt, n, static_cast<float*>(y));
      }
    });
  }

  void add(Stream& s, void* y, const void* x, int64_t n, DType t) override {
    run(s, kElementwise, [=] {
      In xi(x, n, t);
      Out yo(y, n, t, true);
      k::add_inplace(yo.get(), xi.get(), n);
      yo.store();
    });
  }

  void scale(Stream& s, float* x, int64_t n, float a) override {
    run(s, kElementwise, [=] {
      for (int64_t i = 0; i < n; ++i) x[i] *= a;
    });
  }

  void embedding_fwd(Stream& s, const int32_t* tokens, int64_t rows, const void* table, int64_t v0,
                     int64_t vl, int64_t d, void* out, DType t) override {
    run(s, kElementwise, [=] {
      In tb(table, vl * d, t);
      Out o(out, rows * d, t, false);
      k::embedding_fwd_shard(tokens, rows, tb.get(), v0, vl, d, o.get());
      o.store();
    });
  }

  void embedding_bwd(Stream& s, const int32_t* tokens, int64_t rows, const void* dout, int64_t v0,
                     int64_t vl, int64_t d, float* dtable, DType t) override {
    run(s, kElementwise, [=] {
      In g(dout, rows * d, t);
      k::embedding_bwd_shard(tokens, rows, g.get(), v0, vl, d, dtable);
    });
  }

  void rmsnorm_fwd(Stream& s, const void* x, const void* w, int64_t rows, int64_t d, float eps,
                   void* y, float* rstd, DType t) override {
    run(s, kElementwise, [=] {
      In xi(x, rows * d, t), wi(w, d, t);
      Out yo(y, rows * d, t, false);
      k::rmsnorm_fwd(xi.get(), wi.get(), rows, d, eps, yo.get(), rstd);
      yo.store();
    });
  }

  void rmsnorm_bwd(Stream& s, const void* x, const void* w, const float* rstd, const void* dy,
                   int64_t rows, int64_t d, void* dx, float* dw, bool accumulate,
                   DType t) override {
    run(s, kElementwise, [=] {
      In xi(x, rows * d, t), wi(w, d, t), gi(dy, rows * d, t);
      Out o(dx, rows * d, t, accumulate);
      k::rmsnorm_bwd(xi.get(), wi.get(), rstd, gi.get(), rows, d, o.get(), dw, accumulate);
      o.store();
    });
  }

  void rope(Stream& s, void* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
            const float* sin_t, bool inverse, DType t) override {
    run(s, kElementwise, [=] {
      Out o(x, B * T * H * hd, t, true);
      if (inverse)
        k::rope_bwd(o.get(), B, T, H, hd, cos_t, sin_t);
      else
        k::rope_fwd(o.get(), B, T, H, hd, cos_t, sin_t);
      o.store();
    });
  }

  void swiglu_fwd(Stream& s, const void* gate, const void* up, int64_t n, void* out,
                  DType t) override {
    run(s, kElementwise, [=] {
      In g(gate, n, t), u(up, n, t);
      Out o(out, n, t, false);
      k::swiglu_fwd(g.get(), u.get(), n, o.get());
      o.store();
    });
  }

  void swiglu_bwd(Stream& s, const void* gate, const void* up, const void* dout, int64_t n,
                  void* dgate, void* dup, DType t) override {
    run(s, kElementwise, [=] {
      In g(gate, n, t), u(up, n, t), d(dout, n, t);
      // The fp32 kernel may run in place; in bf16 the scratch outputs never
      // alias the widened inputs.
      Out og(dgate, n, t, false), ou(dup, n, t, false);
      k::swiglu_bwd(g.get(), u.get(), d.get(), n, og.get(), ou.get());
      og.store();
      ou.store();
    });
  }

  void attention_fwd(Stream& s, const void* q, const void* k_, const void* v, int64_t B, int64_t T,
                     int64_t Hq, int64_t Hkv, int64_t hd, float scale, void* out, float* lse,
                     DType t) override {
    tally(paths_.attention_fwd, "cpu");
    run(s, kAttention, [=] {
      In qi(q, B * T * Hq * hd, t), ki(k_, B * T * Hkv * hd, t), vi(v, B * T * Hkv * hd, t);
      Out o(out, B * T * Hq * hd, t, false);
      k::attention_fwd(qi.get(), ki.get(), vi.get(), B, T, Hq, Hkv, hd, scale, o.get(), lse);
      o.store();
    });
  }

  void attention_bwd(Stream& s, const void* q, const void* k_, const void* v, const void* out,
                     const float* lse, const void* dout, int64_t B, int64_t T, int64_t Hq,
                     int64_t Hkv, int64_t hd, float scale, void* dq, void* dk, void* dv,
                     DType t) override {
    tally(paths_.attention_bwd, "cpu");
    run(s, kAttention, [=] {
      const int64_t nq = B * T * Hq * hd, nk = B * T * Hkv * hd;
      In qi(q, nq, t), ki(k_, nk, t), vi(v, nk, t), oi(out, nq, t), gi(dout, nq, t);
      Out oq(dq, nq, t, false), ok(dk, nk, t, false), ov(dv, nk, t, false);
      k::attention_bwd(qi.get(), ki.get(), vi.get(), oi.get(), lse, gi.get(), B, T, Hq, Hkv, hd,
                       scale, oq.get(), ok.get(), ov.get());
      oq.store();
      ok.store();
      ov.store();
    });
  }

  void attention_fwd_block(Stream& s, const void* q, const void* k_, const void* v, int64_t B,
                           int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                           const int32_t* qpos, const int32_t* kpos, void* out, float* lse,
                           DType t) override {
    tally(paths_.attention_fwd, "ring_block");
    run(s, kAttention, [=] {
      In qi(q, B * Tq * Hq * hd, t), ki(k_, B * Tk * Hkv * hd, t), vi(v, B * Tk * Hkv * hd, t);
      Out o(out, B * Tq * Hq * hd, t, false);
      k::attention_fwd_block(qi.get(), ki.get(), vi.get(), B, Tq, Tk, Hq, Hkv, hd, scale, qpos,
                             kpos, o.get(), lse);
      o.store();
    });
  }

  void attention_lse_merge(Stream& s, void* out, float* lse, const void* out_b, const float* lse_b,
                           int64_t B, int64_t T, int64_t H, int64_t hd, DType t) override {
    run(s, kAttention, [=] {
      In ob(out_b, B * T * H * hd, t);
      Out o(out, B * T * H * hd, t, true);
      k::attention_lse_merge(o.get(), lse, ob.get(), lse_b, B, T, H, hd);
      o.store();
    });
  }

  void attention_bwd_block(Stream& s, const void* q, const void* k_, const void* v, const void* out,
                           const float* lse, const void* dout, int64_t B, int64_t Tq, int64_t Tk,
                           int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                           const int32_t* kpos, float* dq, float* dk, float* dv, DType t) override {
    tally(paths_.attention_bwd, "ring_block");
    run(s, kAttention, [=] {
      const int64_t nq = B * Tq * Hq * hd, nk = B * Tk * Hkv * hd;
      In qi(q, nq, t), ki(k_, nk, t), vi(v, nk, t), oi(out, nq, t), gi(dout, nq, t);
      k::attention_bwd_block(qi.get(), ki.get(), vi.get(), oi.get(), lse, gi.get(), B, Tq, Tk, Hq,
                             Hkv, hd, scale, qpos, kpos, dq, dk, dv);
    });
  }

  void ce_partial(Stream& s, const void* logits, const int32_t* targets, int64_t rows, int64_t V,
                  int64_t v0, float* max, float* sumexp, float* tlogit, DType t) override {
    run(s, kElementwise, [=] {
      In x(logits, rows * V, t);
      k::ce_partial(x.get(), targets, rows, V, v0, max, sumexp, tlogit);
    });
  }
  void ce_rescale(Stream& s, const float* max, const float* gmax, float* sumexp,
                  int64_t rows) override {
    run(s, kElementwise, [=] { k::ce_rescale(max, gmax, sumexp, rows); });
  }
  void ce_finish(Stream& s, const float* gmax, const float* sumexp, const float* tlogit,
                 const int32_t* targets, int64_t rows, float* lse, float* row_loss) override {
    run(s, kElementwise, [=] { k::ce_finish(gmax, sumexp, tlogit, targets, rows, lse, row_loss); });
  }
  void loss_accumulate(Stream& s, const float* row_loss, const int32_t* targets, int64_t rows,
                       double scale, double* acc) override {
    run(s, kElementwise, [=] { acc[0] += scale * k::loss_sum(row_loss, targets, rows); });
  }
  void ce_bwd(Stream& s, const void* logits, const int32_t* targets, const float* lse, int64_t rows,
              int64_t V, int64_t v0, float scale, void* dlogits, DType t) override {
    run(s, kElementwise, [=] {
      In x(logits, rows * V, t);
      Out o(dlogits, rows * V, t, false);
      k::ce_bwd(x.get(), targets, lse, rows, V, v0, scale, o.get());
      o.store();
    });
  }

  void sumsq(Stream& s, const std::vector<F32Span>& spans, int groups, double* out) override {
    run(s, kOptimizer, [=] {
      std::fill(out, out + groups, 0.0);
      for (const F32Span& sp : spans) {
        ST_CHECK(sp.group >= 0 && sp.group < groups, "sumsq: group ", sp.group, " of ", groups);
        double acc = 0;
        const float* x = sp.p;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (sp.n > (int64_t(1) << 15))
        for (int64_t i = 0; i < sp.n; ++i) acc += double(x[i]) * double(x[i]);
        out[sp.group] += acc;
      }
    });
  }

  void adamw(Stream& s, const std::vector<AdamWSpan>& spans, const AdamWHyper& h) override {
    run(s, kOptimizer, [=] {
      for (const AdamWSpan& a : spans) {
        k::adamw_step(a.w, a.g, a.m, a.v, a.n, h.lr, h.beta1, h.beta2, h.eps,
                      a.decay ? h.weight_decay : 0.f, h.step, h.grad_scale);
        if (a.wc) narrow(a.w, a.n, a.wc, a.wc_t);
      }
    });
  }

 private:
  void tally(std::map<std::string, int64_t>& m, const char* path) {
    std::lock_guard<std::mutex> g(paths_mu_);
    ++m[path];
  }
  std::mutex paths_mu_;
  OpPaths paths_;
};
}  // namespace

Ops& cpu_ops() {
  static CpuOps ops;
  return ops;
}

void rope_tables(const int32_t* positions, int64_t n, int64_t hd, double theta, float* cos_t,
                 float* sin_t) {
  ST_CHECK(hd % 2 == 0, "RoPE needs an even head dimension, got ", hd);
  const int64_t half = hd / 2;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -double(2 * i) / double(hd));
      const double a = double(positions[t]) * freq;
      cos_t[t * half + i] = float(std::cos(a));
      sin_t[t * half + i] = float(std::sin(a));
    }
}
}  // namespace st
