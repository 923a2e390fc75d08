// CUDA probe (see probe.hpp): exercises cuBLASLt (a bf16 GEMM with fp32
// accumulate against a host reference), cuDNN (handle + version) and NCCL
// (a one-rank all-reduce) so the whole CUDA toolchain is compiled, linked and,
// on a GPU machine, run.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cmath>
#include <vector>

#include "probe.hpp"

namespace st::cuda {
namespace {
#define PROBE_TRY(call, what)                                   \
  do {                                                          \
    if (!(call)) {                                              \
      r.error = what;                                           \
      return r;                                                 \
    }                                                           \
  } while (0)

__global__ void fill_bf16(__nv_bfloat16* x, int n, float scale, int seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16(scale * float(((i * 37 + seed) % 17) - 8) / 8.0f);
}
}  // namespace

ProbeResult probe_versions() {
  ProbeResult r;
  r.cublaslt_version = cublasLtGetVersion();
  r.cudnn_version = cudnnGetVersion();
  ncclGetVersion(&r.nccl_version);
  return r;
}

ProbeResult probe_devices() {
  ProbeResult r = probe_versions();
  cudaError_t e = cudaGetDeviceCount(&r.device_count);
  if (e != cudaSuccess || r.device_count == 0) {
    r.device_count = 0;
    r.error = std::string("no CUDA device visible: ") + cudaGetErrorString(e);
    return r;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  r.device_name = prop.name;
  r.sm_major = prop.major;
  r.sm_minor = prop.minor;
  cudaSetDevice(0);

  // cuBLASLt: C[m,n] = A[m,k] * B[k,n], column-major, bf16 in, fp32 out.
  const int m = 64, n = 48, k = 32;
  __nv_bfloat16 *a = nullptr, *b = nullptr;
  float* c = nullptr;
  PROBE_TRY(cudaMalloc(&a, m * k * 2) == cudaSuccess, "cudaMalloc A");
  PROBE_TRY(cudaMalloc(&b, k * n * 2) == cudaSuccess, "cudaMalloc B");
  PROBE_TRY(cudaMalloc(&c, m * n * 4) == cudaSuccess, "cudaMalloc C");
  fill_bf16<<<(m * k + 255) / 256, 256>>>(a, m * k, 1.0f, 1);
  fill_bf16<<<(k * n + 255) / 256, 256>>>(b, k * n, 0.5f, 2);
  cublasLtHandle_t lt;
  PROBE_TRY(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate");
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m);
  float alpha = 1.f, beta = 0.f;
  cublasStatus_t st = cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, nullptr,
                                     nullptr, 0, 0);
  std::vector<float> hc(m * n);
  cudaMemcpy(hc.data(), c, m * n * 4, cudaMemcpyDeviceToHost);
  if (st == CUBLAS_STATUS_SUCCESS) {
    double maxerr = 0;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double ref = 0;
        for (int p = 0; p < k; ++p) {
          int ia = i + p * m, ib = p + j * k;
          float va = __bfloat162float(__float2bfloat16(1.0f * float(((ia * 37 + 1) % 17) - 8) / 8.0f));
          float vb = __bfloat162float(__float2bfloat16(0.5f * float(((ib * 37 + 2) % 17) - 8) / 8.0f));
          ref += double(va) * vb;
        }
        maxerr = std::fmax(maxerr, std::fabs(ref - hc[i + j * m]));
      }
    r.gemm_max_abs_err = maxerr;
  }
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);

  cudnnHandle_t dnn;
  if (cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS) cudnnDestroy(dnn);

  // NCCL: a communicator of one rank, all-reduce in place.
  ncclComm_t comm;
  int dev = 0;
  if (ncclCommInitAll(&comm, 1, &dev) == ncclSuccess) {
    r.nccl_ok = ncclAllReduce(c, c, m * n, ncclFloat, ncclSum, comm, 0) == ncclSuccess &&
                cudaStreamSynchronize(0) == cudaSuccess;
    ncclCommDestroy(comm);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return r;
}
}  // namespace st::cuda
