// cuBLASLt GEMM for the CUDA backend (Ops::gemm): bf16 inputs with fp32
// accumulate and a bf16 or fp32 output, or fp32 throughout (no TF32), with
// the row-major convention of kernels/ops.hpp. The heuristic algorithm is
// chosen once per shape (and alignment) and cached, with a fallback to the
// heuristic's next result (host/gemm_algo.hpp); the workspace comes from
// the device's allocator (MemCat::Workspace) once, at construction. One
// workspace serves every call, so GEMMs must not run concurrently on two
// streams (the model runs them all on the compute stream).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/backend.hpp"
#include "kernels/cuda/host/gemm_algo.hpp"
#include "tensor/device.hpp"

namespace st::kernels::cuda {

class GemmLt {
 public:
  // kCudaGemmWorkspaceBytes (backend.hpp): what cuBLAS recommends for
  // Hopper; Ampere needs less.
  explicit GemmLt(Device& dev, size_t workspace_bytes = kCudaGemmWorkspaceBytes);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // C[M,N] = alpha * op(A) op(B) + beta * C, row-major, lda/ldb/ldc row
  // strides as stored (kernels::gemm's convention). beta != 0 with an fp32 C
  // accumulates weight gradients into fp32 buffers.
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb, float beta,
            __nv_bfloat16* C, int64_t ldc, cudaStream_t stream);
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const __nv_bfloat16* A, int64_t lda, const __nv_bfloat16* B, int64_t ldb, float beta,
            float* C, int64_t ldc, cudaStream_t stream);
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc, cudaStream_t stream);

  size_t cached_shapes() const;  // for tests: plans built so far
  // GEMMs run per heuristic index (0: the heuristic's first choice) since
  // the last take (the step record's `paths`).
  std::map<int, int64_t> take_counts();
  // "" or "GEMM shapes off the heuristic's first algorithm: N" (describe()).
  std::string fallbacks() const;
  size_t workspace_bytes() const { return ws_bytes_; }

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int,
                         int>;  // ta, tb, M, N, K, lda, ldb, ldc, ab dtype, c dtype, alignment
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
           int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc, int ab_type,
           int c_type, cudaStream_t stream);
  Plan& plan_for(const Key& k);

  Device& dev_;
  cublasLtHandle_t handle_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  mutable std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  // Per heuristic index, one relaxed atomic add per GEMM; named at take_counts().
  std::array<std::atomic<int64_t>, cuda_host::kGemmCandidates> counts_{};
};

}  // namespace st::kernels::cuda
