// The cuDNN version and architecture branches of the fused SDPA (see sdpa_rules.hpp).
#include "kernels/cuda/host/sdpa_rules.hpp"

#include <limits>

namespace st::cuda_host {

float sdpa_mask_value(int64_t v) {
  return v < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

bool sdpa_zero_dq_accum(int64_t v) { return v < 90600; }

std::string cudnn_version_name(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::string cudnn_sdpa_refuses(int64_t v, int sm_major, int64_t T, int64_t hd) {
  if (v == 91000 || v == 91001)
    return "cuDNN " + cudnn_version_name(v) +
           " has known bugs in bf16 SDPA (the frontend refuses it; 9.10.2 or newer)";
  if (hd % 8 != 0) return "head dimension " + std::to_string(hd) + " (cuDNN needs a multiple of 8)";
  const int64_t most = sm_major == 9 ? 256 : 128;
  if (hd > most)
    return "head dimension " + std::to_string(hd) + " (cuDNN's SDPA backward takes at most " +
           std::to_string(most) + " on sm_" + std::to_string(sm_major) + "x)";
  if (T == 1) return "sequence length 1 (cuDNN's SDPA backward refuses s_q = s_kv = 1)";
  return "";
}
std::string cudnn_deterministic_bwd_refuses(int64_t v, int sm_major) {
  if (sm_major == 9) return "";
  if (sm_major == 10)
    return v < 91800 ? "cuDNN " + cudnn_version_name(v) +
                           " has no deterministic SDPA backward on sm_10x (9.18.0 or newer)"
                     : "cuDNN's deterministic SDPA backward on sm_10x needs engine knob overrides "
                       "this backend does not set";
  return "cuDNN's deterministic SDPA backward is a Hopper (sm_9x) algorithm; sm_" +
         std::to_string(sm_major) + "x is not known to take it";
}
}  // namespace st::cuda_host
