// The bf16 GEMM's oneDNN half in a build without oneDNN
// (SCALETRAIN_ONEDNN=OFF or libdnnl-dev missing): gemm_bf16 always widens
// its operands to fp32 (gemm.cpp), and asking for oneDNN says why it is not
// there.
#include <string>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace st::kernels {
namespace {
constexpr const char* kWhy = "built without oneDNN: bf16 GEMM widened to fp32";
}

bool gemm_bf16_native() { return false; }

std::string gemm_bf16_library() { return kWhy; }

void gemm_bf16_onednn(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                      const uint16_t*, int64_t, float, void*, int64_t, bool) {
  ST_CHECK(false, "gemm_bf16_onednn: ", kWhy, " (configure with SCALETRAIN_ONEDNN=ON)");
}
}  // namespace st::kernels
