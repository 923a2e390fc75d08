// The recording Ops (record.hpp): each kernel call of kernels/ops.hpp is
// appended to the Recording with its op name, the names and values of its
// size arguments (signature order), dtype and stream; nothing is computed.
#include <utility>

#include "record/record.hpp"

namespace st::record {

const char* kernel_name(Kernel k) {
  static const char* const kNames[] = {
      "gemm",
      "cast",
      "add",
      "scale",
      "embedding_fwd",
      "embedding_bwd",
      "rmsnorm_fwd",
      "rmsnorm_bwd",
      "rope_fwd",
      "rope_bwd",
      "swiglu_fwd",
      "swiglu_bwd",
      "attention_fwd",
      "attention_bwd",
      "attention_fwd_block",
      "attention_bwd_block",
      "attention_lse_merge",
      "ce_partial",
      "ce_rescale",
      "ce_finish",
      "loss_accumulate",
      "ce_bwd",
      "sumsq",
      "adamw",
  };
  static_assert(sizeof kNames / sizeof kNames[0] == size_t(Kernel::kCount), "a name per kernel");
  return size_t(k) < size_t(Kernel::kCount) ? kNames[size_t(k)] : "?";
}

namespace {

class RecordOps final : public Ops {
 public:
  explicit RecordOps(Recording& rec) : rec_(rec) {}
  std::string describe() const override { return "recording (nothing computed)"; }

  void gemm(Stream& s, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float, const void*,
            int64_t, const void*, int64_t, DType ab, float, void*, int64_t, DType c) override {
    KernelCall k = call(s, Kernel::Gemm, "M,N,K", {M, N, K}, ab);
    k.out = c;
    k.trans_a = ta;
    k.trans_b = tb;
    rec_.add(std::move(k));
  }
  void cast(Stream& s, const void*, DType xt, void*, DType yt, int64_t n) override {
    KernelCall k = call(s, Kernel::Cast, "n", {n}, xt);
    k.out = yt;
    rec_.add(std::move(k));
  }
  void add(Stream& s, void*, const void*, int64_t n, DType t) override {
    put(s, Kernel::Add, "n", {n}, t);
  }
  void scale(Stream& s, float*, int64_t n, float) override {
    put(s, Kernel::Scale, "n", {n}, DType::F32);
  }
  void embedding_fwd(Stream& s, const int32_t*, int64_t rows, const void*, int64_t v0, int64_t vl,
                     int64_t d, void*, DType t) override {
    put(s, Kernel::EmbeddingFwd, "rows,v0,vl,d", {rows, v0, vl, d}, t);
  }
  void embedding_bwd(Stream& s, const int32_t*, int64_t rows, const void*, int64_t v0, int64_t vl,
                     int64_t d, float*, DType t) override {
    put(s, Kernel::EmbeddingBwd, "rows,v0,vl,d", {rows, v0, vl, d}, t);
  }
  void rmsnorm_fwd(Stream& s, const void*, const void*, int64_t rows, int64_t d, float, void*,
                   float*, DType t) override {
    put(s, Kernel::RmsnormFwd, "rows,d", {rows, d}, t);
  }
  void rmsnorm_bwd(Stream& s, const void*, const void*, const float*, const void*, int64_t rows,
                   int64_t d, void*, float*, bool, DType t) override {
    put(s, Kernel::RmsnormBwd, "rows,d", {rows, d}, t);
  }
  void rope(Stream& s, void*, int64_t B, int64_t T, int64_t H, int64_t hd, const float*,
            const float*, bool inverse, DType t) override {
    put(s, inverse ? Kernel::RopeBwd : Kernel::RopeFwd, "B,T,H,hd", {B, T, H, hd}, t);
  }
  void swiglu_fwd(Stream& s, const void*, const void*, int64_t n, void*, DType t) override {
    put(s, Kernel::SwigluFwd, "n", {n}, t);
  }
  void swiglu_bwd(Stream& s, const void*, const void*, const void*, int64_t n, void*, void*,
                  DType t) override {
    put(s, Kernel::SwigluBwd, "n", {n}, t);
  }
  void attention_fwd(Stream& s, const void*, const void*, const void*, int64_t B, int64_t T,
                     int64_t Hq, int64_t Hkv, int64_t hd, float, void*, float*, DType t) override {
    put(s, Kernel::AttentionFwd, "B,T,Hq,Hkv,hd", {B, T, Hq, Hkv, hd}, t);
  }
  void attention_bwd(Stream& s, const void*, const void*, const void*, const void*, const float*,
                     const void*, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float,
                     void*, void*, void*, DType t) override {
    put(s, Kernel::AttentionBwd, "B,T,Hq,Hkv,hd", {B, T, Hq, Hkv, hd}, t);
  }
  void attention_fwd_block(Stream& s, const void*, const void*, const void*, int64_t B, int64_t Tq,
                           int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float, const int32_t*,
                           const int32_t*, void*, float*, DType t) override {
    put(s, Kernel::AttentionFwdBlock, "B,Tq,Tk,Hq,Hkv,hd", {B, Tq, Tk, Hq, Hkv, hd}, t);
  }
  void attention_lse_merge(Stream& s, void*, float*, const void*, const float*, int64_t B,
                           int64_t T, int64_t H, int64_t hd, DType t) override {
    put(s, Kernel::AttentionLseMerge, "B,T,H,hd", {B, T, H, hd}, t);
  }
  void attention_bwd_block(Stream& s, const void*, const void*, const void*, const void*,
                           const float*, const void*, int64_t B, int64_t Tq, int64_t Tk, int64_t Hq,
                           int64_t Hkv, int64_t hd, float, const int32_t*, const int32_t*, float*,
                           float*, float*, DType t) override {
    put(s, Kernel::AttentionBwdBlock, "B,Tq,Tk,Hq,Hkv,hd", {B, Tq, Tk, Hq, Hkv, hd}, t);
  }
  void ce_partial(Stream& s, const void*, const int32_t*, int64_t rows, int64_t V, int64_t v0,
                  float*, float*, float*, DType t) override {
    put(s, Kernel::CePartial, "rows,V,v0", {rows, V, v0}, t);
  }
  void ce_rescale(Stream& s, const float*, const float*, float*, int64_t rows) override {
    put(s, Kernel::CeRescale, "rows", {rows}, DType::F32);
  }
  void ce_finish(Stream& s, const float*, const float*, const float*, const int32_t*, int64_t rows,
                 float*, float*) override {
    put(s, Kernel::CeFinish, "rows", {rows}, DType::F32);
  }
  void loss_accumulate(Stream& s, const float*, const int32_t*, int64_t rows, double,
                       double*) override {
    put(s, Kernel::LossAccumulate, "rows", {rows}, DType::F32);
  }
  void ce_bwd(Stream& s, const void*, const int32_t*, const float*, int64_t rows, int64_t V,
              int64_t v0, float, void*, DType t) override {
    put(s, Kernel::CeBwd, "rows,V,v0", {rows, V, v0}, t);
  }
  // Multi-tensor ops: the number of spans and their elements in all.
  void sumsq(Stream& s, const std::vector<F32Span>& spans, int groups, double*) override {
    int64_t n = 0;
    for (const F32Span& x : spans) n += x.n;
    put(s, Kernel::Sumsq, "spans,n,groups", {int64_t(spans.size()), n, groups}, DType::F32);
  }
  void adamw(Stream& s, const std::vector<AdamWSpan>& spans, const AdamWHyper&) override {
    int64_t n = 0;
    DType wc = DType::F32, state = DType::F32;
    for (const AdamWSpan& x : spans) {
      n += x.n;
      if (x.wc) wc = x.wc_t;
      state = x.state_t;
    }
    // The kernel's dtype is the state's (what it reads and writes three of);
    // out is the compute copy refreshed (the state's own dtype when none).
    KernelCall k = call(s, Kernel::Adamw, "spans,n", {int64_t(spans.size()), n}, state);
    k.out = state == DType::BF16 ? state : wc;
    rec_.add(std::move(k));
  }

 private:
  KernelCall call(Stream& s, Kernel kind, const char* shape, std::vector<int64_t> dims, DType t) {
    KernelCall k;
    k.kind = kind;
    k.op = kernel_name(kind);
    k.shape = shape;
    k.dims = std::move(dims);
    k.t = t;
    k.out = t;
    k.stream = s.name();
    return k;
  }
  void put(Stream& s, Kernel kind, const char* shape, std::vector<int64_t> dims, DType t) {
    rec_.add(call(s, kind, shape, std::move(dims), t));
  }
  Recording& rec_;
};

}  // namespace

std::unique_ptr<Ops> make_record_ops(Recording& rec) { return std::make_unique<RecordOps>(rec); }

}  // namespace st::record
