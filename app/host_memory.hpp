// Start-up check that the ranks on this host fit in its memory, before the
// model is allocated: the --dry-run estimate of every rank on this host
// against the memory available to the job (MemAvailable, and the cgroup
// limit Slurm puts on the job). A model beyond it is refused with both
// figures instead of dying in std::bad_alloc or the OOM killer.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "plan/memory.hpp"
#include "runtime/runtime.hpp"
#include "trainer.hpp"

namespace st {

// What world rank `rank` is estimated to hold at its peak (lib/plan's memory
// model, the --dry-run estimate).
plan::MemoryEstimate rank_memory(const Config& cfg, int rank);

// Bytes the job may still allocate on this host: min(MemAvailable, cgroup v2
// memory.max - memory.current); -1 when neither can be read.
int64_t host_memory_available();

// "" when the ranks of this host fit (runtime.device=cpu; GPU memory is the
// CUDA engine's check), else the message naming both figures and what to change.
std::string check_host_memory(const Config& cfg, const Runtime& rt);

}  // namespace st
