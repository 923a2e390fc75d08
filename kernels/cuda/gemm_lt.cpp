// cuBLASLt GEMM (see gemm_lt.hpp). Row-major C = op(A) op(B) is computed as
// the column-major C^T = op(B)^T op(A)^T, so B is cuBLAS's first operand
// (the descriptors come from kernels/cuda/host/gemm_map.hpp).
#include "kernels/cuda/gemm_lt.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/host/gemm_map.hpp"

namespace st::kernels::cuda {

struct GemmLt::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
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

const GemmLt::Plan& GemmLt::plan_for(const Key& k) {
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
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->la, p->lb, p->lc, p->lc,
                                                     pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  ST_CUBLAS_CHECK(st);
  ST_CHECK(found > 0, "cuBLASLt found no algorithm for GEMM M=", M, " N=", N, " K=", K,
           " trans_a=", ta, " trans_b=", tb, " lda=", lda, " ldb=", ldb, " ldc=", ldc,
           " alignment=", align);
  p->algo = res.algo;
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
  const Plan& p = plan_for(key);
  // D == C with one layout: cuBLASLt's in-place form (beta = 1 accumulates
  // weight gradients and residual adds); with beta = 0, C is not read.
  ST_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, B, p.la, A, p.lb, &beta, C, p.lc, C, p.lc,
                                 &p.algo, ws_, ws_bytes_, stream));
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
