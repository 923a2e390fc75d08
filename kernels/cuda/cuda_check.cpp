// Formatters behind the check macros of cuda_check.hpp.
#include "kernels/cuda/cuda_check.hpp"

namespace st::cuda {
void throw_cuda_error(const char* call, cudaError_t rc, const char* file, int line) {
  throw_error("CUDA", file, line,
              detail::cat(call, " failed: ", cudaGetErrorName(rc), ": ", cudaGetErrorString(rc)));
}

void throw_cublas_error(const char* call, cublasStatus_t rc, const char* file, int line) {
  throw_error("cuBLAS", file, line,
              detail::cat(call, " failed: status ", int(rc), " (", cublasLtGetStatusName(rc), ": ",
                          cublasLtGetStatusString(rc), ")"));
}

void throw_cudnn_error(const char* call, cudnnStatus_t rc, const char* file, int line) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  throw_error("cuDNN", file, line,
              detail::cat(call, " failed: ", cudnnGetErrorString(rc), last[0] ? ": " : "", last));
}
}  // namespace st::cuda
