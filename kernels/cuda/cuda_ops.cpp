// The CUDA backend's Ops (kernels/ops.hpp): every op the model, the engine
// and the optimizer run, on the CUDA device's stream, with the semantics and
// rounding points of the CPU implementation (kernels/cpu/ops_cpu.cpp).
//  - Activations are bf16: train.precision=fp32 is refused by
//    CudaBackend::supports, and an op handed fp32 activations throws. The
//    ops bf16 training also runs on fp32 data take it: gemm with an fp32
//    output (and fp32 inputs), cast, add, scale.
//  - GEMM: cuBLASLt (gemm_lt.hpp). Full causal attention: cuDNN's fused
//    SDPA (sdpa_cudnn.hpp); for a shape cuDNN takes no engine for (or a head
//    dimension it does not support) the custom block kernels run instead,
//    once announced on rank 0. The block form (ring attention), the merge
//    and every other op: the custom kernels of ops_cuda.hpp.
//  - Scratch (ring-attention row sums, fallback accumulators, norm
//    partials) comes from the device's allocator as MemCat::Workspace and
//    is handed back right after the op is enqueued: on the compute stream
//    that is the device's stream-ordered reuse; on any other stream the op
//    waits for the stream first.
#include "kernels/cuda/cuda_ops.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/host/attn_path.hpp"
#include "kernels/cuda/host/gemm_algo.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/sdpa_cudnn.hpp"

namespace st::cuda {
namespace {
namespace kc = kernels::cuda;
using kc::bf16;

void need_bf16(DType t, const char* op) {
  if (t != DType::BF16)
    throw_error("scaletrain", __FILE__, __LINE__,
                detail::cat("CUDA backend: ", op, " runs on bf16 activations, got ", dtype_name(t),
                            " (train.precision=bf16 on GPUs)"));
}
template <typename T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

// Device memory for the duration of one op's enqueue (see the file comment).
class Scratch {
 public:
  Scratch(CudaDevice& d, size_t bytes, Stream& s)
      : d_(d),
        s_(s),
        bytes_(std::max<size_t>(bytes, 1)),
        p_(d.allocate(bytes_, MemCat::Workspace)) {}
  ~Scratch() {
    if (&s_ != &d_.compute_stream()) cudaStreamSynchronize(native(s_));
    d_.deallocate(p_, bytes_, MemCat::Workspace);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* get() const {
    return static_cast<T*>(p_);
  }

 private:
  CudaDevice& d_;
  Stream& s_;
  size_t bytes_;
  void* p_;
};

class CudaOps final : public Ops {
 public:
  CudaOps(CudaDevice& dev, bool deterministic_bwd)
      : dev_(dev),
        gemm_(dev),
        sdpa_(dev, deterministic_bwd),
        block_bwd_chosen_(deterministic_bwd && !sdpa_.deterministic_refuses().empty()) {}
  ~CudaOps() override {
    if (pos_) dev_.deallocate(pos_, pos_n_ * sizeof(int32_t), MemCat::Workspace);
  }

  std::string describe() const override {
    return detail::cat("CUDA: cuBLASLt ", cublasLtGetVersion(), " GEMM, ",
                       kc::CudnnSdpa::description(),
                       " for causal attention, custom kernels for ring-attention blocks; bf16 "
                       "stored, fp32 math; ",
                       attn_.describe(), gemm_.fallbacks());
  }

  // What ran since the last take (kernels/ops.hpp OpPaths), per step.
  OpPaths take_paths() override {
    OpPaths r;
    const cuda_host::AttnCounts a = attn_.take_counts();
    r.attention_fwd = cuda_host::attn_path_names(a, false);
    r.attention_bwd = cuda_host::attn_path_names(a, true);
    if (const int64_t n = ring_fwd_.exchange(0)) r.attention_fwd["ring_block"] = n;
    if (const int64_t n = ring_bwd_.exchange(0)) r.attention_bwd["ring_block"] = n;
    for (const auto& [i, n] : gemm_.take_counts()) r.gemm[cuda_host::gemm_path_name(i)] = n;
    r.known = true;
    return r;
  }

  void gemm(Stream& s, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, DType ab, float beta, void* C,
            int64_t ldc, DType c) override {
    const cudaStream_t cs = native(s);
    if (K == 0 && M > 0 && N > 0) {  // C = beta C, as BLAS does
      ST_CHECK(beta == 0.f || beta == 1.f, "gemm with K=0 and beta=", beta);
      if (beta == 0.f)
        ST_CUDA_CHECK(cudaMemset2DAsync(C, size_t(ldc) * dtype_size(c), 0,
                                        size_t(N) * dtype_size(c), size_t(M), cs));
      return;
    }
    if (ab == DType::BF16 && c == DType::BF16)
      gemm_.gemm(ta, tb, M, N, K, alpha, as<bf16>(A), lda, as<bf16>(B), ldb, beta, as<bf16>(C), ldc,
                 cs);
    else if (ab == DType::BF16 && c == DType::F32)
      gemm_.gemm(ta, tb, M, N, K, alpha, as<bf16>(A), lda, as<bf16>(B), ldb, beta, as<float>(C),
                 ldc, cs);
    else if (ab == DType::F32 && c == DType::F32)
      gemm_.gemm(ta, tb, M, N, K, alpha, as<float>(A), lda, as<float>(B), ldb, beta, as<float>(C),
                 ldc, cs);
    else
      ST_CHECK(false, "gemm: output dtype ", dtype_name(c), " for ", dtype_name(ab), " inputs");
  }

  void cast(Stream& s, const void* x, DType xt, void* y, DType yt, int64_t n) override {
    const cudaStream_t cs = native(s);
    if (xt == yt) {
      if (x != y && n > 0)
        ST_CUDA_CHECK(
            cudaMemcpyAsync(y, x, size_t(n) * dtype_size(xt), cudaMemcpyDeviceToDevice, cs));
    } else if (xt == DType::F32 && yt == DType::BF16) {
      kc::cast_f32_bf16(as<float>(x), as<bf16>(y), n, cs);
    } else if (xt == DType::BF16 && yt == DType::F32) {
      kc::cast_bf16_f32(as<bf16>(x), as<float>(y), n, cs);
    } else {
      ST_CHECK(false, "cast from ", dtype_name(xt), " to ", dtype_name(yt));
    }
  }

  void add(Stream& s, void* y, const void* x, int64_t n, DType t) override {
    if (t == DType::F32)
      kc::add(as<float>(y), as<float>(x), n, native(s));
    else if (t == DType::BF16)
      kc::add(as<bf16>(y), as<bf16>(x), n, native(s));
    else
      ST_CHECK(false, "add of ", dtype_name(t));
  }

  void scale(Stream& s, float* x, int64_t n, float a) override { kc::scale(x, n, a, native(s)); }

  void embedding_fwd(Stream& s, const int32_t* tokens, int64_t rows, const void* table, int64_t v0,
                     int64_t vl, int64_t d, void* out, DType t) override {
    need_bf16(t, "embedding_fwd");
    kc::embedding_fwd(tokens, rows, as<bf16>(table), v0, vl, d, as<bf16>(out), native(s));
  }
  void embedding_bwd(Stream& s, const int32_t* tokens, int64_t rows, const void* dout, int64_t v0,
                     int64_t vl, int64_t d, float* dtable, DType t) override {
    need_bf16(t, "embedding_bwd");
    kc::embedding_bwd(tokens, rows, as<bf16>(dout), v0, vl, d, dtable, native(s));
  }

  void rmsnorm_fwd(Stream& s, const void* x, const void* w, int64_t rows, int64_t d, float eps,
                   void* y, float* rstd, DType t) override {
    need_bf16(t, "rmsnorm_fwd");
    kc::rmsnorm_fwd(as<bf16>(x), as<bf16>(w), rows, d, eps, as<bf16>(y), rstd, native(s));
  }
  void rmsnorm_bwd(Stream& s, const void* x, const void* w, const float* rstd, const void* dy,
                   int64_t rows, int64_t d, void* dx, float* dw, bool accumulate,
                   DType t) override {
    need_bf16(t, "rmsnorm_bwd");
    kc::rmsnorm_bwd(as<bf16>(x), as<bf16>(w), rstd, as<bf16>(dy), rows, d, as<bf16>(dx), dw,
                    accumulate, native(s));
  }

  void rope(Stream& s, void* x, int64_t B, int64_t T, int64_t H, int64_t hd, const float* cos_t,
            const float* sin_t, bool inverse, DType t) override {
    need_bf16(t, "rope");
    kc::rope(as<bf16>(x), B, T, H, hd, cos_t, sin_t, inverse, native(s));
  }

  void swiglu_fwd(Stream& s, const void* gate, const void* up, int64_t n, void* out,
                  DType t) override {
    need_bf16(t, "swiglu_fwd");
    kc::swiglu_fwd(as<bf16>(gate), as<bf16>(up), n, as<bf16>(out), native(s));
  }
  void swiglu_bwd(Stream& s, const void* gate, const void* up, const void* dout, int64_t n,
                  void* dgate, void* dup, DType t) override {
    need_bf16(t, "swiglu_bwd");
    kc::swiglu_bwd(as<bf16>(gate), as<bf16>(up), as<bf16>(dout), n, as<bf16>(dgate), as<bf16>(dup),
                   native(s));
  }

  void attention_fwd(Stream& s, const void* q, const void* k, const void* v, int64_t B, int64_t T,
                     int64_t Hq, int64_t Hkv, int64_t hd, float scale, void* out, float* lse,
                     DType t) override {
    need_bf16(t, "attention_fwd");
    const cudaStream_t cs = native(s);
    if (use_cudnn(B, T, Hq, Hkv, hd, false)) {
      sdpa_.fwd(as<bf16>(q), as<bf16>(k), as<bf16>(v), B, T, Hq, Hkv, hd, scale, as<bf16>(out), lse,
                cs);
      return;
    }
    const int32_t* pos = positions(T, cs);
    kc::attention_fwd_block(as<bf16>(q), as<bf16>(k), as<bf16>(v), B, T, T, Hq, Hkv, hd, scale, pos,
                            pos, as<bf16>(out), lse, cs);
  }

  void attention_bwd(Stream& s, const void* q, const void* k, const void* v, const void* out,
                     const float* lse, const void* dout, int64_t B, int64_t T, int64_t Hq,
                     int64_t Hkv, int64_t hd, float scale, void* dq, void* dk, void* dv,
                     DType t) override {
    need_bf16(t, "attention_bwd");
    const cudaStream_t cs = native(s);
    // runtime.attention_backward=deterministic: cuDNN's deterministic
    // backward where it has one (host/sdpa_rules.hpp), else the block
    // kernels, by choice (counted).
    if (block_bwd_chosen_) attn_.ran(cuda_host::AttnPath::BlockChosen, true);
    if (!block_bwd_chosen_ && use_cudnn(B, T, Hq, Hkv, hd, true)) {
      sdpa_.bwd(as<bf16>(q), as<bf16>(k), as<bf16>(v), as<bf16>(out), lse, as<bf16>(dout), B, T, Hq,
                Hkv, hd, scale, as<bf16>(dq), as<bf16>(dk), as<bf16>(dv), cs);
      return;
    }
    // The block kernels add into fp32 accumulators: zero them, then round.
    const int64_t nq = B * T * Hq * hd, nk = B * T * Hkv * hd;
    Scratch acc(dev_, size_t(nq + 2 * nk) * sizeof(float), s);
    Scratch drow(dev_, size_t(B * Hq * T) * sizeof(float), s);
    float* dq32 = acc.get<float>();
    ST_CUDA_CHECK(cudaMemsetAsync(dq32, 0, size_t(nq + 2 * nk) * sizeof(float), cs));
    const int32_t* pos = positions(T, cs);
    kc::attention_bwd_block(as<bf16>(q), as<bf16>(k), as<bf16>(v), as<bf16>(out), lse,
                            as<bf16>(dout), B, T, T, Hq, Hkv, hd, scale, pos, pos, dq32, dq32 + nq,
                            dq32 + nq + nk, drow.get<float>(), cs);
    kc::cast_f32_bf16(dq32, as<bf16>(dq), nq, cs);
    kc::cast_f32_bf16(dq32 + nq, as<bf16>(dk), nk, cs);
    kc::cast_f32_bf16(dq32 + nq + nk, as<bf16>(dv), nk, cs);
  }

  void attention_fwd_block(Stream& s, const void* q, const void* k, const void* v, int64_t B,
                           int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                           const int32_t* qpos, const int32_t* kpos, void* out, float* lse,
                           DType t) override {
    need_bf16(t, "attention_fwd_block");
    ++ring_fwd_;
    kc::attention_fwd_block(as<bf16>(q), as<bf16>(k), as<bf16>(v), B, Tq, Tk, Hq, Hkv, hd, scale,
                            qpos, kpos, as<bf16>(out), lse, native(s));
  }

  void attention_lse_merge(Stream& s, void* out, float* lse, const void* out_b, const float* lse_b,
                           int64_t B, int64_t T, int64_t H, int64_t hd, DType t) override {
    need_bf16(t, "attention_lse_merge");
    kc::attention_lse_merge(as<bf16>(out), lse, as<bf16>(out_b), lse_b, B, T, H, hd, native(s));
  }

  void attention_bwd_block(Stream& s, const void* q, const void* k, const void* v, const void* out,
                           const float* lse, const void* dout, int64_t B, int64_t Tq, int64_t Tk,
                           int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                           const int32_t* kpos, float* dq, float* dk, float* dv, DType t) override {
    need_bf16(t, "attention_bwd_block");
    ++ring_bwd_;
    Scratch drow(dev_, size_t(B * Hq * Tq) * sizeof(float), s);
    kc::attention_bwd_block(as<bf16>(q), as<bf16>(k), as<bf16>(v), as<bf16>(out), lse,
                            as<bf16>(dout), B, Tq, Tk, Hq, Hkv, hd, scale, qpos, kpos, dq, dk, dv,
                            drow.get<float>(), native(s));
  }

  void ce_partial(Stream& s, const void* logits, const int32_t* targets, int64_t rows, int64_t V,
                  int64_t v0, float* max, float* sumexp, float* tlogit, DType t) override {
    need_bf16(t, "ce_partial");
    kc::ce_partial(as<bf16>(logits), targets, rows, V, v0, max, sumexp, tlogit, native(s));
  }
  void ce_rescale(Stream& s, const float* max, const float* gmax, float* sumexp,
                  int64_t rows) override {
    kc::ce_rescale(max, gmax, sumexp, rows, native(s));
  }
  void ce_finish(Stream& s, const float* gmax, const float* sumexp, const float* tlogit,
                 const int32_t* targets, int64_t rows, float* lse, float* row_loss) override {
    kc::ce_finish(gmax, sumexp, tlogit, targets, rows, lse, row_loss, native(s));
  }
  void loss_accumulate(Stream& s, const float* row_loss, const int32_t* targets, int64_t rows,
                       double scale, double* acc) override {
    kc::loss_accumulate(row_loss, targets, rows, scale, acc, native(s));
  }
  void ce_bwd(Stream& s, const void* logits, const int32_t* targets, const float* lse, int64_t rows,
              int64_t V, int64_t v0, float scale, void* dlogits, DType t) override {
    need_bf16(t, "ce_bwd");
    kc::ce_bwd(as<bf16>(logits), targets, lse, rows, V, v0, scale, as<bf16>(dlogits), native(s));
  }

  void sumsq(Stream& s, const std::vector<F32Span>& spans, int groups, double* out) override {
    Scratch part(dev_, size_t(kc::sumsq_scratch(spans)) * sizeof(double), s);
    kc::sumsq(spans, groups, out, part.get<double>(), native(s));
  }

  void adamw(Stream& s, const std::vector<AdamWSpan>& spans, const AdamWHyper& h) override {
    kc::adamw(spans, h, native(s));
  }

 private:
  // cuDNN for this shape and direction? The bookkeeping (retries, counts,
  // what describe() reports) is cuda_host::AttnPathPolicy, tested on CPUs.
  bool use_cudnn(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, bool backward) {
    using D = cuda_host::AttnPathPolicy::Decision;
    const cuda_host::AttnShape sh{B, T, Hq, Hkv, hd};
    bool cudnn = false;
    std::lock_guard<std::mutex> g(mu_);
    switch (attn_.decide(sh, backward)) {
      case D::UseCudnn:
        cudnn = true;
        break;
      case D::UseBlock:
        break;
      case D::TryCudnn:
        if (std::string why = sdpa_.refuses(T, hd); !why.empty()) {
          attn_.refused(sh, why);
          log0("CUDA backend: causal attention B=", B, " T=", T, " Hq=", Hq, " Hkv=", Hkv,
               " hd=", hd, " runs on the custom block kernels, not cuDNN: ", why);
          break;
        }
        try {
          sdpa_.prepare(false, B, T, Hq, Hkv, hd);
          sdpa_.prepare(true, B, T, Hq, Hkv, hd);
          attn_.plan_ok(sh);
          cudnn = true;
        } catch (const Error& e) {
          const bool settled = attn_.plan_failed(sh, e.what());
          log0("CUDA backend: cuDNN plans for causal attention B=", B, " T=", T, " Hq=", Hq,
               " Hkv=", Hkv, " hd=", hd, " failed (", e.what(), "); ",
               settled ? "the shape stays on the custom block kernels"
                       : "this call runs the block kernels, the next one retries");
        }
        break;
    }
    attn_.ran(cudnn ? cuda_host::AttnPath::Cudnn : cuda_host::AttnPath::Block, backward);
    return cudnn;
  }

  // Device positions 0..T-1 for the block kernels (grown on demand, filled
  // on the stream that uses them).
  const int32_t* positions(int64_t T, cudaStream_t s) {
    std::lock_guard<std::mutex> g(mu_);
    if (T > pos_n_) {
      if (pos_) {
        ST_CUDA_CHECK(cudaStreamSynchronize(s));
        dev_.deallocate(pos_, size_t(pos_n_) * sizeof(int32_t), MemCat::Workspace);
        pos_ = nullptr;
      }
      pos_ = static_cast<int32_t*>(dev_.allocate(size_t(T) * sizeof(int32_t), MemCat::Workspace));
      pos_n_ = T;
      kc::iota(pos_, T, s);
    }
    return pos_;
  }

  CudaDevice& dev_;
  kc::GemmLt gemm_;
  kc::CudnnSdpa sdpa_;
  std::mutex mu_;
  cuda_host::AttnPathPolicy attn_;
  // runtime.attention_backward=deterministic on a GPU or cuDNN without a
  // deterministic cuDNN backward: the block kernels.
  bool block_bwd_chosen_;
  std::atomic<int64_t> ring_fwd_{0}, ring_bwd_{0};  // ring-attention block calls
  int32_t* pos_ = nullptr;
  int64_t pos_n_ = 0;
};
}  // namespace

std::unique_ptr<Ops> make_cuda_ops(CudaDevice& dev, bool deterministic_bwd) {
  return std::make_unique<CudaOps>(dev, deterministic_bwd);
}
}  // namespace st::cuda
