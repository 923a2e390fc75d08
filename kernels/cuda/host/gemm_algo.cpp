// cuBLASLt algorithm choice and fallback (see gemm_algo.hpp).
#include "kernels/cuda/host/gemm_algo.hpp"

namespace st::cuda_host {

int pick_gemm_algo(const std::vector<GemmCandidate>& c, size_t workspace_bytes) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].state_ok && c[i].workspace <= workspace_bytes && !c[i].failed) return int(i);
  return -1;
}

std::string gemm_algo_refusals(const std::vector<GemmCandidate>& c, size_t workspace_bytes) {
  if (c.empty()) return "no heuristic result";
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) {
    s += (i ? "; " : "") + gemm_path_name(int(i)) + ": ";
    if (!c[i].state_ok)
      s += "not supported";
    else if (c[i].workspace > workspace_bytes)
      s += "needs " + std::to_string(c[i].workspace) + " bytes of workspace, have " +
           std::to_string(workspace_bytes);
    else if (c[i].failed)
      s += "refused at run time";
    else
      s += "usable";
  }
  return s;
}

std::string gemm_path_name(int i) { return "cublaslt_h" + std::to_string(i); }
}  // namespace st::cuda_host
