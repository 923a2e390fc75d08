// CUDA probe: what the CUDA backend sees on this machine (devices, library
// versions) and a one-shot check that cuBLASLt, cuDNN and NCCL initialise and
// compute. Built whenever nvcc is present; runs only where a GPU is visible.
#pragma once
#include <string>

namespace st::cuda {
struct ProbeResult {
  int device_count = 0;
  std::string error;         // why nothing ran (no GPU, driver missing, ...)
  std::string device_name;   // device 0
  int sm_major = 0, sm_minor = 0;
  size_t cublaslt_version = 0, cudnn_version = 0;
  int nccl_version = 0;
  double gemm_max_abs_err = -1;  // cuBLASLt bf16 GEMM vs host fp32 reference
  bool nccl_ok = false;          // single-rank NCCL all-reduce
};
// Library versions only (no device needed).
ProbeResult probe_versions();
// Versions plus device checks; error set and device_count 0 without a GPU.
ProbeResult probe_devices();
}  // namespace st::cuda
