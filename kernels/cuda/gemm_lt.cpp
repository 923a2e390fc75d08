// cuBLASLt GEMM (see gemm_lt.hpp). Row-major C = op(A) op(B) is computed as
// the column-major C^T = op(B)^T op(A)^T, so B is cuBLAS's first operand
// (the descriptors come from kernels/cuda/host/gemm_map.hpp). The
// algorithm: the heuristic's candidates, the first usable one, the next when
// cuBLASLt refuses it at run time (kernels/cuda/host/gemm_algo.hpp).
#include "kernels/cuda/gemm_lt.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/host/gemm_algo.hpp"
#include "kernels/cuda/host/gemm_map.hpp"

namespace st::kernels::cuda {

struct GemmLt::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's results, in its order
  std::vector<cuda_host::GemmCandidate> cand;
  int chosen = -1;
  std::string what;  // the shape, for messages
  ~Plan() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

GemmLt::GemmLt(Device& dev, size_t workspace_bytes) : dev_(dev), ws_bytes_(workspace_bytes) {
  ST_CUBLAS_CHECK(cublasLtCreate(&handle_));
  if (ws_bytes_) ws_ = dev_.allocate(ws_bytes_, MemCat::Workspace);
}

GemmLt::~GemmLt() {
  plans_.clear();
  if (ws_) dev_.deallocate(ws_, ws_bytes_, MemCat::Workspace);
  if (handle_) cublasLtDestroy(handle_);
}

size_t GemmLt::cached_shapes() const {
  std::lock_guard<std::mutex> g(mu_);
  return plans_.size();
}

std::map<int, int64_t> GemmLt::take_counts() {
  std::map<int, int64_t> r;
  for (size_t i = 0; i < counts_.size(); ++i)
    if (const int64_t n = counts_[i].exchange(0, std::memory_order_relaxed)) r[int(i)] = n;
  return r;
}

std::string GemmLt::fallbacks() const {
  std::lock_guard<std::mutex> g(mu_);
  int64_t n = 0;
  for (const auto& [k, p] : plans_) n += p->chosen > 0;
  return n ? detail::cat("; GEMM shapes off cuBLASLt's first heuristic algorithm: ", n) : "";
}

GemmLt::Plan& GemmLt::plan_for(const Key& k) {
  auto it = plans_.find(k);
  if (it != plans_.end()) return *it->second;
  const auto [ta, tb, M, N, K, lda, ldb, ldc, ab_type, c_type, align] = k;
  const auto ab = cudaDataType_t(ab_type);
  auto p = std::make_unique<Plan>();
  // The column-major problem (kernels/cuda/host/gemm_map.hpp, tested on CPUs).
  const cuda_host::LtGemm g = cuda_host::map_row_major_gemm(ta, tb, M, N, K, lda, ldb, ldc);
  const cublasOperation_t opA = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  ST_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  ST_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
  ST_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
  ST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, ab, uint64_t(g.first.rows),
                                             uint64_t(g.first.cols), g.first.ld));
  ST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, ab, uint64_t(g.second.rows),
                                             uint64_t(g.second.cols), g.second.ld));
  ST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, cudaDataType_t(c_type), uint64_t(g.c.rows),
                                             uint64_t(g.c.cols), g.c.ld));

  cublasLtMatmulPreference_t pref;
  ST_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = ws_bytes_;
  uint32_t al = uint32_t(align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al,
                                       sizeof al);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al,
                                       sizeof al);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al,
                                       sizeof al);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al,
                                       sizeof al);
  cublasLtMatmulHeuristicResult_t res[cuda_host::kGemmCandidates] = {};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->la, p->lb, p->lc, p->lc,
                                                     pref, cuda_host::kGemmCandidates, res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  ST_CUBLAS_CHECK(st);
  for (int i = 0; i < found; ++i) {
    cublasLtMatmulHeuristicResult_t chk{};
    const bool ok = res[i].state == CUBLAS_STATUS_SUCCESS &&
                    cublasLtMatmulAlgoCheck(handle_, p->op, p->la, p->lb, p->lc, p->lc,
                                            &res[i].algo, &chk) == CUBLAS_STATUS_SUCCESS;
    p->algos.push_back(res[i].algo);
    p->cand.push_back({ok, res[i].workspaceSize, false});
  }
  p->what = detail::cat("M=", M, " N=", N, " K=", K, " trans_a=", ta, " trans_b=", tb, " lda=", lda,
                        " ldb=", ldb, " ldc=", ldc, " alignment=", align);
  p->chosen = cuda_host::pick_gemm_algo(p->cand, ws_bytes_);
  ST_CHECK(p->chosen >= 0, "cuBLASLt has no usable algorithm for GEMM ", p->what, " (",
           cuda_host::gemm_algo_refusals(p->cand, ws_bytes_), ")");
  auto& ref = *p;
  plans_.emplace(k, std::move(p));
  return ref;
}

void GemmLt::run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                 int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                 int ab_type, int c_type, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  ST_CHECK(K > 0, "GEMM with K=", K);
  const int abytes = ab_type == int(CUDA_R_32F) ? 4 : 2;
  const int cbytes = c_type == int(CUDA_R_32F) ? 4 : 2;
  using cuda_host::gemm_alignment;
  int align = gemm_alignment(reinterpret_cast<uintptr_t>(A), lda, abytes);
  align = std::min(align, gemm_alignment(reinterpret_cast<uintptr_t>(B), ldb, abytes));
  align = std::min(align, gemm_alignment(reinterpret_cast<uintptr_t>(C), ldc, cbytes));
  const Key key{ta, tb, M, N, K, lda, ldb, ldc, ab_type, c_type, align};
  std::lock_guard<std::mutex> g(mu_);
  Plan& p = plan_for(key);
  // D == C with one layout: cuBLASLt's in-place form (beta = 1 accumulates
  // weight gradients and residual adds); with beta = 0, C is not read. A
  // candidate refused before launch hands over to the next one.
  for (;;) {
    const cublasStatus_t st =
        cublasLtMatmul(handle_, p.op, &alpha, B, p.la, A, p.lb, &beta, C, p.lc, C, p.lc,
                       &p.algos[size_t(p.chosen)], ws_, ws_bytes_, stream);
    if (st == CUBLAS_STATUS_SUCCESS) break;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) ST_CUBLAS_CHECK(st);
    p.cand[size_t(p.chosen)].failed = true;
    const int next = cuda_host::pick_gemm_algo(p.cand, ws_bytes_);
    log0("CUDA backend: cuBLASLt refused heuristic algorithm ", p.chosen, " for GEMM ", p.what,
         " (", cublasLtGetStatusString(st), "); ",
         next >= 0 ? detail::cat("using algorithm ", next) : std::string("none left"));
    ST_CHECK(next >= 0, "cuBLASLt has no usable algorithm for GEMM ", p.what, " (",
             cuda_host::gemm_algo_refusals(p.cand, ws_bytes_), ")");
    p.chosen = next;
  }
  counts_[size_t(p.chosen)].fetch_add(1, std::memory_order_relaxed);
}

void GemmLt::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                  float beta, __nv_bfloat16* C, int64_t ldc, cudaStream_t stream) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, int(CUDA_R_16BF), int(CUDA_R_16BF),
      stream);
}

void GemmLt::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, cudaStream_t stream) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, int(CUDA_R_16BF), int(CUDA_R_32F),
      stream);
}

void GemmLt::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                  cudaStream_t stream) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, int(CUDA_R_32F), int(CUDA_R_32F),
      stream);
}
}  // namespace st::kernels::cuda
