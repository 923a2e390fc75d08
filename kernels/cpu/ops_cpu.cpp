// The CPU backend's Ops (kernels/ops.hpp) over the fp32 kernels of
// cpu_kernels.hpp. Every op is enqueued on its stream (run at once on the
// default CPU device, on the stream's worker thread on the strict one).
// bf16 GEMMs multiply bf16 directly with fp32 accumulation (oneDNN where the
// CPU has bf16 instructions, gemm_bf16). The other ops run the bf16
// overloads of the kernels, which read bf16 as stored and compute in fp32
// registers; every output is rounded to bf16 once, when stored: the
// rounding points of the CUDA kernels, so
// train.precision=bf16 on CPU ranks exercises the numbers a GPU run produces.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.hpp"
#include "core/util.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/ops.hpp"

namespace st {
namespace k = kernels;
namespace {

bool is_bf16(DType t) { return t == DType::BF16; }
// A tensor pointer as its element type: fp32, or bf16 bits.
const float* f(const void* p) { return static_cast<const float*>(p); }
float* f(void* p) { return static_cast<float*>(p); }
const uint16_t* h(const void* p) { return static_cast<const uint16_t*>(p); }
uint16_t* h(void* p) { return static_cast<uint16_t*>(p); }

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
    OpPaths r;
    for (size_t i = 0; i < size_t(Path::kCount); ++i)
      if (const int64_t n = paths_[i].exchange(0, std::memory_order_relaxed)) {
        auto& m = i < size_t(Path::AttnFwdCpu) ? r.gemm
                  : (i == size_t(Path::AttnFwdCpu) || i == size_t(Path::AttnFwdRing))
                      ? r.attention_fwd
                      : r.attention_bwd;
        m[kPathNames[i]] = n;
      }
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
    tally(is_bf16(ab) ? Path::GemmBf16 : Path::GemmF32);
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

  // The activation ops read and write their dtype directly: the bf16
  // kernels convert in registers, with no widened copies.
  void add(Stream& s, void* y, const void* x, int64_t n, DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::add_inplace(h(y), h(x), n);
      else
        k::add_inplace(f(y), f(x), n);
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
      if (is_bf16(t))
        k::embedding_fwd_shard(tokens, rows, h(table), v0, vl, d, h(out));
      else
        k::embedding_fwd_shard(tokens, rows, f(table), v0, vl, d, f(out));
    });
  }

  void embedding_bwd(Stream& s, const int32_t* tokens, int64_t rows, const void* dout, int64_t v0,
                     int64_t vl, int64_t d, float* dtable, DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::embedding_bwd_shard(tokens, rows, h(dout), v0, vl, d, dtable);
      else
        k::embedding_bwd_shard(tokens, rows, f(dout), v0, vl, d, dtable);
    });
  }

  void rmsnorm_fwd(Stream& s, const void* x, const void* w, int64_t rows, int64_t d, float eps,
                   void* y, float* rstd, DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::rmsnorm_fwd(h(x), h(w), rows, d, eps, h(y), rstd);
      else
        k::rmsnorm_fwd(f(x), f(w), rows, d, eps, f(y), rstd);
    });
  }

  void rmsnorm_bwd(Stream& s, const void* x, const void* w, const float* rstd, const void* dy,
                   int64_t rows, int64_t d, void* dx, float* dw, bool accumulate,
                   DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::rmsnorm_bwd(h(x), h(w), rstd, h(dy), rows, d, h(dx), dw, accumulate);
      else
        k::rmsnorm_bwd(f(x), f(w), rstd, f(dy), rows, d, f(dx), dw, accumulate);
    });
  }

  void rope(Stream& s, void* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
            const float* sin_t, bool inverse, DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t)) {
        if (inverse)
          k::rope_bwd(h(x), B, T, H, hd, cos_t, sin_t);
        else
          k::rope_fwd(h(x), B, T, H, hd, cos_t, sin_t);
      } else {
        if (inverse)
          k::rope_bwd(f(x), B, T, H, hd, cos_t, sin_t);
        else
          k::rope_fwd(f(x), B, T, H, hd, cos_t, sin_t);
      }
    });
  }

  void swiglu_fwd(Stream& s, const void* gate, const void* up, int64_t n, void* out,
                  DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::swiglu_fwd(h(gate), h(up), n, h(out));
      else
        k::swiglu_fwd(f(gate), f(up), n, f(out));
    });
  }

  // Elementwise: each output element is written after its inputs are read,
  // so dgate and dup may alias gate and up in either dtype.
  void swiglu_bwd(Stream& s, const void* gate, const void* up, const void* dout, int64_t n,
                  void* dgate, void* dup, DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::swiglu_bwd(h(gate), h(up), h(dout), n, h(dgate), h(dup));
      else
        k::swiglu_bwd(f(gate), f(up), f(dout), n, f(dgate), f(dup));
    });
  }

  // Attention reads and writes its dtype directly (the bf16 kernels multiply
  // through the bf16 GEMM): no widened copies.
  void attention_fwd(Stream& s, const void* q, const void* k_, const void* v, int64_t B, int64_t T,
                     int64_t Hq, int64_t Hkv, int64_t hd, float scale, void* out, float* lse,
                     DType t) override {
    tally(Path::AttnFwdCpu);
    run(s, kAttention, [=] {
      if (is_bf16(t))
        k::attention_fwd(h(q), h(k_), h(v), B, T, Hq, Hkv, hd, scale, h(out), lse);
      else
        k::attention_fwd(f(q), f(k_), f(v), B, T, Hq, Hkv, hd, scale, f(out), lse);
    });
  }

  void attention_bwd(Stream& s, const void* q, const void* k_, const void* v, const void* out,
                     const float* lse, const void* dout, int64_t B, int64_t T, int64_t Hq,
                     int64_t Hkv, int64_t hd, float scale, void* dq, void* dk, void* dv,
                     DType t) override {
    tally(Path::AttnBwdCpu);
    run(s, kAttention, [=] {
      if (is_bf16(t))
        k::attention_bwd(h(q), h(k_), h(v), h(out), lse, h(dout), B, T, Hq, Hkv, hd, scale, h(dq),
                         h(dk), h(dv));
      else
        k::attention_bwd(f(q), f(k_), f(v), f(out), lse, f(dout), B, T, Hq, Hkv, hd, scale, f(dq),
                         f(dk), f(dv));
    });
  }

  void attention_fwd_block(Stream& s, const void* q, const void* k_, const void* v, int64_t B,
                           int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                           const int32_t* qpos, const int32_t* kpos, void* out, float* lse,
                           DType t) override {
    tally(Path::AttnFwdRing);
    run(s, kAttention, [=] {
      if (is_bf16(t))
        k::attention_fwd_block(h(q), h(k_), h(v), B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, h(out),
                               lse);
      else
        k::attention_fwd_block(f(q), f(k_), f(v), B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, f(out),
                               lse);
    });
  }

  void attention_lse_merge(Stream& s, void* out, float* lse, const void* out_b, const float* lse_b,
                           int64_t B, int64_t T, int64_t H, int64_t hd, DType t) override {
    run(s, kAttention, [=] {
      if (is_bf16(t))
        k::attention_lse_merge(h(out), lse, h(out_b), lse_b, B, T, H, hd);
      else
        k::attention_lse_merge(f(out), lse, f(out_b), lse_b, B, T, H, hd);
    });
  }

  void attention_bwd_block(Stream& s, const void* q, const void* k_, const void* v, const void* out,
                           const float* lse, const void* dout, int64_t B, int64_t Tq, int64_t Tk,
                           int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                           const int32_t* kpos, float* dq, float* dk, float* dv, DType t) override {
    tally(Path::AttnBwdRing);
    run(s, kAttention, [=] {
      if (is_bf16(t))
        k::attention_bwd_block(h(q), h(k_), h(v), h(out), lse, h(dout), B, Tq, Tk, Hq, Hkv, hd,
                               scale, qpos, kpos, dq, dk, dv);
      else
        k::attention_bwd_block(f(q), f(k_), f(v), f(out), lse, f(dout), B, Tq, Tk, Hq, Hkv, hd,
                               scale, qpos, kpos, dq, dk, dv);
    });
  }

  void ce_partial(Stream& s, const void* logits, const int32_t* targets, int64_t rows, int64_t V,
                  int64_t v0, float* max, float* sumexp, float* tlogit, DType t) override {
    run(s, kElementwise, [=] {
      if (is_bf16(t))
        k::ce_partial(h(logits), targets, rows, V, v0, max, sumexp, tlogit);
      else
        k::ce_partial(f(logits), targets, rows, V, v0, max, sumexp, tlogit);
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
      if (is_bf16(t))
        k::ce_bwd(h(logits), targets, lse, rows, V, v0, scale, h(dlogits));
      else
        k::ce_bwd(f(logits), targets, lse, rows, V, v0, scale, f(dlogits));
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
        const float wd = a.decay ? h.weight_decay : 0.f;
        if (a.state_t == DType::BF16) {
          ST_CHECK(a.wc == nullptr, "adamw: bf16 state is its own compute copy");
          k::adamw_step_bf16(static_cast<uint16_t*>(a.w), a.g, static_cast<uint16_t*>(a.m),
                             static_cast<uint16_t*>(a.v), a.n, h.lr, h.beta1, h.beta2, h.eps, wd,
                             h.step, h.grad_scale, h.rng_seed, a.rng_key, a.rng_pos);
          continue;
        }
        ST_CHECK(a.state_t == DType::F32, "adamw: state of dtype ", dtype_name(a.state_t));
        float* w = static_cast<float*>(a.w);
        k::adamw_step(w, a.g, static_cast<float*>(a.m), static_cast<float*>(a.v), a.n, h.lr,
                      h.beta1, h.beta2, h.eps, wd, h.step, h.grad_scale);
        if (a.wc) narrow(w, a.n, a.wc, a.wc_t);
      }
    });
  }

 private:
  // The paths counted per call: one relaxed atomic add, named and grouped
  // only when take_paths() sums them (gemm first, then attention forward and
  // backward, in the order of kPathNames).
  enum class Path { GemmF32, GemmBf16, AttnFwdCpu, AttnFwdRing, AttnBwdCpu, AttnBwdRing, kCount };
  static constexpr const char* kPathNames[] = {"cpu_fp32",   "cpu_bf16", "cpu",
                                               "ring_block", "cpu",      "ring_block"};
  void tally(Path p) { paths_[size_t(p)].fetch_add(1, std::memory_order_relaxed); }
  std::array<std::atomic<int64_t>, size_t(Path::kCount)> paths_{};
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
