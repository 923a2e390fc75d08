// Implementation of precision.hpp.
#include "precision.hpp"

#include "comm/mpi_communicator.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace st {
PrecisionChoice auto_precision(const std::string& device, bool cpu_bf16_native,
                               const std::string& cpu_bf16_library) {
  if (device == "cuda") return {"bf16", "auto: GPUs multiply bf16 in hardware"};
  if (cpu_bf16_native)
    return {"bf16", "auto: this CPU multiplies bf16 in hardware (" + cpu_bf16_library + ")"};
  return {"fp32", "auto: no native bf16 GEMM on this CPU (" + cpu_bf16_library +
                      "), so bf16 would widen to fp32 and run no faster"};
}

void resolve_precision(Config& cfg, HostGroup& world) {
  if (cfg.train.precision != "auto") return;
  const bool cpu = cfg.runtime.device != "cuda";
  // Every rank must train in the same precision: bf16 only if all have it
  // (the minimum, as the maximum of the negation), through the communicator
  // layer: counted, and given up after runtime.timeout_s naming the rank.
  double lacks = cpu && !kernels::gemm_bf16_native() ? 1 : 0;
  world.all_reduce_max(&lacks, 1);
  const int native = lacks == 0;
  PrecisionChoice c =
      auto_precision(cfg.runtime.device, native != 0, cpu ? kernels::gemm_bf16_library() : "");
  if (cpu && native == 0 && kernels::gemm_bf16_native())
    c.reason = "auto: not every rank's CPU multiplies bf16 in hardware (this one does: " +
               kernels::gemm_bf16_library() + ")";
  cfg.train.precision = c.precision;
  cfg.train.precision_choice = c.reason;
}
}  // namespace st
