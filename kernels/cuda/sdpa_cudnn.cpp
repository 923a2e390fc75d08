// cuDNN fused SDPA through the backend graph API (see sdpa_cudnn.hpp). The
// graphs themselves (tensors, dims, strides, the op list) are described in
// kernels/cuda/host/sdpa_graph.hpp, tested on CPUs; here each described
// tensor and op becomes a cuDNN backend descriptor, the graph is finalized,
// the heuristics give an engine and the plan is cached. Every descriptor is
// RAII-owned by the cached plan.
#include "kernels/cuda/sdpa_cudnn.hpp"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/host/sdpa_graph.hpp"
#include "kernels/cuda/host/sdpa_rules.hpp"

namespace st::kernels::cuda {
namespace {

class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t t) {
    ST_CUDNN_CHECK(cudnnBackendCreateDescriptor(t, &d_));
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
    ST_CUDNN_CHECK(cudnnBackendSetAttribute(d_, a, t, n, v));
  }
  void set_desc(cudnnBackendAttributeName_t a, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  void finalize() { ST_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The handle attributes are marked deprecated in cuDNN 9.19 in favour of
// device-property descriptors, but remain the documented way to bind a graph
// and a plan to a live handle; keep the one use warning-free.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

using Dims = std::array<int64_t, 4>;

// The variant pack's unique ids (host/sdpa_graph.hpp numbers the graph's tensors).
constexpr int64_t kQ = cuda_host::kUidQ, kK = cuda_host::kUidK, kV = cuda_host::kUidV,
                  kO = cuda_host::kUidO, kStats = cuda_host::kUidStats,
                  kScale = cuda_host::kUidScale, kNegInf = cuda_host::kUidNegInf,
                  kDO = cuda_host::kUidDO, kDQ = cuda_host::kUidDQ, kDK = cuda_host::kUidDK,
                  kDV = cuda_host::kUidDV, kOne = cuda_host::kUidOne, kDQAcc = cuda_host::kUidDQAcc,
                  kSoftmaxSum = cuda_host::kUidSoftmaxSum;
}  // namespace

struct CudnnSdpa::Plan {
  std::vector<std::unique_ptr<Desc>> keep;  // every descriptor the graph references
  std::unique_ptr<Desc> graph, plan;
  int64_t workspace = 0;

  Desc& make(cudnnBackendDescriptorType_t t) {
    keep.push_back(std::make_unique<Desc>(t));
    return *keep.back();
  }
  std::vector<cudnnBackendDescriptor_t> ops;

  const Desc& tensor(int64_t uid, cudnnDataType_t dt, Dims dim, Dims stride, bool is_virtual,
                     bool by_value = false) {
    Desc& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim.data());
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride.data());
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize();
    return t;
  }
  void add_op(Desc& op) {
    op.finalize();
    ops.push_back(op.get());
  }

  // y = mode(x [, b [, t]])
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Desc& x, const Desc* b,
                 const Desc* t, const Desc& y, int64_t axis = -1) {
    Desc& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    add_op(op);
  }
  void reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
    Desc& rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    rd.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    rd.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    add_op(op);
  }
  void matmul(const Desc& a, const Desc& b, const Desc& c) {
    Desc& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    mm.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    add_op(op);
  }
  void reshape(const Desc& x, const Desc& y) {
    Desc& op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(op);
  }

  void build(cudnnHandle_t h, const std::string& what) {
    graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph->set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &h);
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()),
               ops.data());
    graph->finalize();
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      cudnnBackendDescriptor_t g = graph->get();
      heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
      heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) continue;
      int64_t n = 0;
      if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                   nullptr) != CUDNN_STATUS_SUCCESS ||
          n <= 0)
        continue;
      std::vector<std::unique_ptr<Desc>> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < n; ++i) {
        cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(cfgs.back()->get());
      }
      int64_t got = 0;
      ST_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, raw.data()));
      for (int64_t i = 0; i < got; ++i) {
        auto p = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        p->set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &h);
        p->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
        const cudnnStatus_t st = cudnnBackendFinalize(p->get());
        if (st != CUDNN_STATUS_SUCCESS) {
          tried += std::string(" ") + cudnnGetErrorString(st);
          continue;
        }
        int64_t ws = 0, cnt = 0;
        ST_CUDNN_CHECK(cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &cnt, &ws));
        workspace = ws;
        plan = std::move(p);
        keep.insert(keep.end(), std::make_move_iterator(cfgs.begin()),
                    std::make_move_iterator(cfgs.end()));
        return;
      }
    }
    char last[512] = {0};
    cudnnGetLastErrorString(last, sizeof last);
    throw_error("cuDNN", __FILE__, __LINE__,
                detail::cat("no cuDNN engine supports the fused SDPA graph for ", what, " (cuDNN ",
                            cudnnGetVersion(), "; plan finalize:",
                            tried.empty() ? " none tried" : tried, last[0] ? "; " : "", last, ")"));
  }
};

namespace {
// The graph description's calls (host/sdpa_graph.hpp, tested on CPUs) as
// cuDNN backend descriptors owned by the plan.
class CudnnSink final : public cuda_host::GraphSink {
 public:
  explicit CudnnSink(CudnnSdpa::Plan& p) : p_(p) {}
  int tensor(const cuda_host::GTensor& t) override {
    made_.push_back(&p_.tensor(t.uid, dtype(t.type), t.dim, t.stride, t.is_virtual, t.by_value));
    return int(made_.size()) - 1;
  }
  void pointwise(cuda_host::Pw m, cuda_host::GType prec, int x, int b, int t, int y,
                 int64_t axis) override {
    p_.pointwise(mode(m), dtype(prec), *made_[size_t(x)], b >= 0 ? made_[size_t(b)] : nullptr,
                 t >= 0 ? made_[size_t(t)] : nullptr, *made_[size_t(y)], axis);
  }
  void reduction(cuda_host::Red m, int x, int y) override {
    p_.reduction(m == cuda_host::Red::Max ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD,
                 *made_[size_t(x)], *made_[size_t(y)]);
  }
  void matmul(int a, int b, int c) override {
    p_.matmul(*made_[size_t(a)], *made_[size_t(b)], *made_[size_t(c)]);
  }
  void reshape(int x, int y) override { p_.reshape(*made_[size_t(x)], *made_[size_t(y)]); }

 private:
  static cudnnDataType_t dtype(cuda_host::GType t) {
    switch (t) {
      case cuda_host::GType::BF16:
        return CUDNN_DATA_BFLOAT16;
      case cuda_host::GType::F32:
        return CUDNN_DATA_FLOAT;
      case cuda_host::GType::I32:
        return CUDNN_DATA_INT32;
      case cuda_host::GType::Bool:
        return CUDNN_DATA_BOOLEAN;
    }
    return CUDNN_DATA_FLOAT;
  }
  static cudnnPointwiseMode_t mode(cuda_host::Pw m) {
    using cuda_host::Pw;
    switch (m) {
      case Pw::Mul:
        return CUDNN_POINTWISE_MUL;
      case Pw::Sub:
        return CUDNN_POINTWISE_SUB;
      case Pw::Add:
        return CUDNN_POINTWISE_ADD;
      case Pw::Div:
        return CUDNN_POINTWISE_DIV;
      case Pw::Exp:
        return CUDNN_POINTWISE_EXP;
      case Pw::Log:
        return CUDNN_POINTWISE_LOG;
      case Pw::GenIndex:
        return CUDNN_POINTWISE_GEN_INDEX;
      case Pw::CmpGe:
        return CUDNN_POINTWISE_CMP_GE;
      case Pw::Select:
        return CUDNN_POINTWISE_BINARY_SELECT;
      case Pw::Identity:
        return CUDNN_POINTWISE_IDENTITY;
    }
    return CUDNN_POINTWISE_IDENTITY;
  }
  CudnnSdpa::Plan& p_;
  std::vector<const Desc*> made_;
};

void execute(cudnnHandle_t h, const CudnnSdpa::Plan& p, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* ws) {
  Desc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  vp.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()),
         ptrs.data());
  vp.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  vp.finalize();
  ST_CUDNN_CHECK(cudnnBackendExecute(h, p.plan->get(), vp.get()));
}
}  // namespace

CudnnSdpa::CudnnSdpa(Device& dev, bool deterministic_bwd)
    : dev_(dev), version_(int64_t(cudnnGetVersion())) {
  ST_CUDNN_CHECK(cudnnCreate(&handle_));
  int d = 0;
  ST_CUDA_CHECK(cudaGetDevice(&d));
  ST_CUDA_CHECK(cudaDeviceGetAttribute(&sm_major_, cudaDevAttrComputeCapabilityMajor, d));
  det_bwd_ = deterministic_bwd && deterministic_refuses().empty();
}

std::string CudnnSdpa::deterministic_refuses() const {
  return cuda_host::cudnn_deterministic_bwd_refuses(version_, sm_major_);
}

std::string CudnnSdpa::refuses(int64_t T, int64_t hd) const {
  return cuda_host::cudnn_sdpa_refuses(version_, sm_major_, T, hd);
}

CudnnSdpa::~CudnnSdpa() {
  plans_.clear();
  if (ws_) dev_.deallocate(ws_, ws_bytes_, MemCat::Workspace);
  if (bwd_ws_) dev_.deallocate(bwd_ws_, bwd_ws_bytes_, MemCat::Workspace);
  if (handle_) cudnnDestroy(handle_);
}

void CudnnSdpa::prepare(bool backward, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
  std::lock_guard<std::mutex> g(mu_);
  plan_for(Key{backward, B, T, Hq, Hkv, hd});
}

size_t CudnnSdpa::cached_plans() const {
  std::lock_guard<std::mutex> g(mu_);
  return plans_.size();
}

const char* CudnnSdpa::description() {
  static const std::string d =
      detail::cat("cuDNN ", cuda_host::cudnn_version_name(int64_t(cudnnGetVersion())),
                  " fused SDPA (backend graph API, cudnn-frontend 1.23 lowering)");
  return d.c_str();
}

CudnnSdpa::Plan& CudnnSdpa::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [is_bwd, B, T, Hq, Hkv, hd] = key;
  ST_CHECK(Hkv > 0 && Hq % Hkv == 0, "n_heads ", Hq, " must be a multiple of n_kv_heads ", Hkv);
  const std::string why = refuses(T, hd);
  ST_CHECK(why.empty(), "cuDNN fused attention: ", why);
  auto p = std::make_unique<Plan>();
  CudnnSink sink(*p);
  cuda_host::describe_sdpa(sink, is_bwd, B, T, Hq, Hkv, hd, is_bwd && det_bwd_);
  p->build(handle_,
           detail::cat(is_bwd ? (det_bwd_ ? "deterministic backward" : "backward") : "forward",
                       " B=", B, " T=", T, " Hq=", Hq, " Hkv=", Hkv, " hd=", hd));
  auto& ref = *p;
  plans_.emplace(key, std::move(p));
  return ref;
}

void* CudnnSdpa::grow(void*& p, size_t& have, size_t bytes, cudaStream_t stream) {
  if (bytes > have || !p) {
    if (p) {
      ST_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old one may still be in use
      dev_.deallocate(p, have, MemCat::Workspace);
    }
    p = nullptr;
    have = 0;
    p = dev_.allocate(std::max<size_t>(bytes, 1), MemCat::Workspace);
    have = std::max<size_t>(bytes, 1);
  }
  return p;
}

void CudnnSdpa::fwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                    int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                    __nv_bfloat16* out, float* lse, cudaStream_t stream) {
  std::lock_guard<std::mutex> g(mu_);
  Plan& p = plan_for(Key{false, B, T, Hq, Hkv, hd});
  void* ws = grow(ws_, ws_bytes_, size_t(p.workspace), stream);
  float neg = cuda_host::sdpa_mask_value(version_);
  ST_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  execute(handle_, p, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
          {const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k),
           const_cast<__nv_bfloat16*>(v), out, lse, &scale, &neg},
          ws);
}

void CudnnSdpa::bwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                    const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* dout,
                    int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                    __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t stream) {
  std::lock_guard<std::mutex> g(mu_);
  Plan& p = plan_for(Key{true, B, T, Hq, Hkv, hd});
  void* ws = grow(ws_, ws_bytes_, size_t(p.workspace), stream);
  // The frontend's own workspace tensors: the fp32 dQ accumulator (none in
  // the deterministic graph), then softmax_sum (both sizes multiples of 16
  // bytes as hd % 8 == 0).
  const size_t acc = det_bwd_ ? 0 : size_t(B * Hq * T * hd) * sizeof(float);
  const size_t sum = size_t(B * Hq * T) * sizeof(float);
  char* fe = static_cast<char*>(grow(bwd_ws_, bwd_ws_bytes_, acc + sum, stream));
  if (acc && cuda_host::sdpa_zero_dq_accum(version_))  // before cuDNN 9.6 the engine does not
    ST_CUDA_CHECK(cudaMemsetAsync(fe, 0, acc, stream));
  float neg = cuda_host::sdpa_mask_value(version_), one = 1.f;
  ST_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  if (det_bwd_) {
    execute(
        handle_, p,
        {kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kNegInf, kOne, kSoftmaxSum},
        {const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k),
         const_cast<__nv_bfloat16*>(v), const_cast<__nv_bfloat16*>(out), const_cast<float*>(lse),
         const_cast<__nv_bfloat16*>(dout), dq, dk, dv, &scale, &neg, &one, fe},
        ws);
    return;
  }
  execute(handle_, p,
          {kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kNegInf, kOne, kDQAcc, kSoftmaxSum},
          {const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k),
           const_cast<__nv_bfloat16*>(v), const_cast<__nv_bfloat16*>(out), const_cast<float*>(lse),
           const_cast<__nv_bfloat16*>(dout), dq, dk, dv, &scale, &neg, &one, fe, fe + acc},
          ws);
}
}  // namespace st::kernels::cuda
