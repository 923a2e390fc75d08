// train.precision=auto, resolved once at start before anything reads the
// precision: bf16 where the device multiplies bf16 matrices in hardware (a
// GPU; a CPU whose oneDNN bf16 matmul runs on AVX512-BF16 or AMX on every
// rank), else fp32 (a bf16 step there widens to fp32 and is no faster).
#pragma once
#include <string>

#include "comm/communicator.hpp"
#include "config/config.hpp"

namespace st {
// Collective over `world` (every rank) when train.precision is "auto" (the
// ranks agree: bf16 only if every rank's CPU has it); otherwise a no-op.
// Sets cfg.train.precision to "fp32" or "bf16" and
// cfg.train.precision_choice to the reason, for the log, run.json and the
// report.
void resolve_precision(Config& cfg, HostGroup& world);

// The choice on one process, without MPI: what auto means on `device`
// ("cpu" or "cuda") given whether this CPU's bf16 GEMM is native, and the
// library text behind it. Returns {precision, reason}.
struct PrecisionChoice {
  std::string precision, reason;
};
PrecisionChoice auto_precision(const std::string& device, bool cpu_bf16_native,
                               const std::string& cpu_bf16_library);
}  // namespace st
