// Check macros for the CUDA libraries (CUDA runtime, cuBLAS(Lt), cuDNN), one
// per library as docs/design.md asks: each failure throws st::Error with host,
// rank, file:line, the call and the library's own error string. NCCL's macro
// lives with the communicator (kernels/cuda/nccl_communicator.cpp), the only
// code of the backend that calls NCCL.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/error.hpp"

namespace st::cuda {
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t rc, const char* file, int line);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t rc, const char* file,
                                     int line);
[[noreturn]] void throw_cudnn_error(const char* call, cudnnStatus_t rc, const char* file, int line);
}  // namespace st::cuda

#define ST_CUDA_CHECK(call)                                                 \
  do {                                                                      \
    cudaError_t st_cuda_rc_ = (call);                                       \
    if (st_cuda_rc_ != cudaSuccess)                                         \
      ::st::cuda::throw_cuda_error(#call, st_cuda_rc_, __FILE__, __LINE__); \
  } while (0)

#define ST_CUBLAS_CHECK(call)                                                   \
  do {                                                                          \
    cublasStatus_t st_cublas_rc_ = (call);                                      \
    if (st_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::st::cuda::throw_cublas_error(#call, st_cublas_rc_, __FILE__, __LINE__); \
  } while (0)

#define ST_CUDNN_CHECK(call)                                                  \
  do {                                                                        \
    cudnnStatus_t st_cudnn_rc_ = (call);                                      \
    if (st_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                 \
      ::st::cuda::throw_cudnn_error(#call, st_cudnn_rc_, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, at the
// launch site, instead of at the next unrelated call.
#define ST_CUDA_CHECK_LAUNCH() ST_CUDA_CHECK(cudaGetLastError())

// The answer of cudaEventQuery / cudaStreamQuery: true when complete, false
// when not yet (cudaErrorNotReady, which is cleared so that the next
// ST_CUDA_CHECK_LAUNCH does not report it), and a thrown error otherwise.
#define ST_CUDA_QUERY(call) ::st::cuda::query_done((call), #call, __FILE__, __LINE__)
namespace st::cuda {
inline bool query_done(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  throw_cuda_error(call, rc, file, line);
}
}  // namespace st::cuda
