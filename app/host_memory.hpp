// Start-up check that the ranks on this host fit in its memory, before the
// model is allocated: the --dry-run estimate of every rank on this host
// against the memory available to the job (MemAvailable, and the cgroup
// limit Slurm puts on the job), and each rank's estimate against its own
// address-space limit (RLIMIT_AS, `ulimit -v`). A model beyond either is
// refused naming the GiB a rank needs, what it has and which limit decides,
// instead of dying in std::bad_alloc, mmap or the OOM killer. The estimate
// (one recorded step per pipeline stage) is made once per host, by its
// first rank, and shared with the host's other ranks.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "plan/memory.hpp"
#include "runtime/runtime.hpp"
#include "trainer.hpp"

namespace st {

class MpiCommunicator;

// Bytes the job may still allocate on this host: min(MemAvailable, cgroup v2
// memory.max - memory.current); -1 when neither can be read. `which` (if
// given) names the figure that decided.
int64_t host_memory_available(std::string* which = nullptr);

// This process's address-space limit (RLIMIT_AS, set by `ulimit -v`) and
// what it has mapped already (VmSize): limit -1 when unlimited.
struct AddressSpace {
  int64_t limit = -1, used = 0;
};
AddressSpace address_space();

// The verdict for the peak parts of one stage (`need`, the --dry-run
// estimate), pure so it can be tested: "" when a rank needing `need` fits
// its address space `as` and the `ranks_here` ranks needing `need_host` in
// all fit the host's `avail` bytes (-1: unknown), else the message naming
// GiB needed per rank, what there is and the limit or key that decides.
std::string memory_verdict(const plan::MemParts& need, int rank, const AddressSpace& as,
                           double need_host, int ranks_here, const std::string& host, int64_t avail,
                           const std::string& avail_what);

// Collective over `node` (the ranks of this host; its rank 0 records the
// stages present here and shares the estimates). "" when the ranks of this
// host fit (runtime.device=cpu; GPU memory is the CUDA engine's check),
// else memory_verdict's message. *share_per_rank (when given; CPU ranks
// only, else -1): the bytes available on this host over its ranks, the
// capacity a CPU rank's memory is measured against (run.json
// device.memory_capacity_bytes).
std::string check_host_memory(const Config& cfg, const Runtime& rt, MpiCommunicator& node,
                              int64_t* share_per_rank = nullptr);

}  // namespace st
