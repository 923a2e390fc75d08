// scaletrain-cuda-probe: prints what the CUDA backend sees. Exit 0 when a GPU
// ran every check, 77 (skip) when no GPU is visible, 1 when a check failed.
#include <cstdio>

#include "probe.hpp"

int main() {
  auto r = st::cuda::probe_devices();
  std::printf("cuBLASLt %zu, cuDNN %zu, NCCL %d\n", r.cublaslt_version, r.cudnn_version,
              r.nccl_version);
  if (r.device_count == 0) {
    std::printf("SKIP: %s\n", r.error.c_str());
    return 77;
  }
  std::printf("device 0: %s (sm_%d%d), %d device(s)\n", r.device_name.c_str(), r.sm_major,
              r.sm_minor, r.device_count);
  std::printf("cuBLASLt bf16 GEMM max |err| vs host: %g\nNCCL 1-rank all-reduce: %s\n",
              r.gemm_max_abs_err, r.nccl_ok ? "ok" : "FAILED");
  if (!r.error.empty()) std::printf("error: %s\n", r.error.c_str());
  bool ok = r.error.empty() && r.gemm_max_abs_err >= 0 && r.gemm_max_abs_err < 1e-3 && r.nccl_ok;
  return ok ? 0 : 1;
}
