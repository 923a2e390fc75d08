// Which cuBLASLt algorithm a GEMM shape runs, compiled without nvcc and
// tested on CPUs (label cuda-host). kernels/cuda/gemm_lt.cpp asks the
// heuristic for up to kGemmCandidates results, in its order of preference,
// and checks each (cublasLtMatmulAlgoCheck); the first usable one runs. When
// cuBLASLt refuses it at run time (not supported / invalid value), it is
// marked failed and the next one runs: no fallback is silent, the index
// that ran is counted per step ("cublaslt_h<i>" in the step record's
// `paths`), and only when every candidate failed is the GEMM an error,
// naming each candidate's reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace st::cuda_host {

inline constexpr int kGemmCandidates = 8;

struct GemmCandidate {
  bool state_ok = false;  // the heuristic result's state, and cublasLtMatmulAlgoCheck, succeeded
  size_t workspace = 0;   // bytes the algorithm needs
  bool failed = false;    // cublasLtMatmul refused it at run time
};

// The index of the first usable candidate (state ok, workspace within
// `workspace_bytes`, not failed), or -1.
int pick_gemm_algo(const std::vector<GemmCandidate>& c, size_t workspace_bytes);

// Why no candidate is usable, one reason per candidate ("no heuristic
// result" when there are none).
std::string gemm_algo_refusals(const std::vector<GemmCandidate>& c, size_t workspace_bytes);

// The step record's name of candidate i: "cublaslt_h<i>".
std::string gemm_path_name(int i);
}  // namespace st::cuda_host
