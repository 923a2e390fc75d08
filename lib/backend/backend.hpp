// The Backend: what one device kind supplies to the one model and the one
// engine: a Device (memory, streams, events, copies), Ops (every kernel) and
// Communicators (collectives on that device's buffers), plus what it can
// run of a config and the peak FLOP/s MFU is reported against.
//
//  - cpu: always built; the default CPU device (inline streams), the CPU
//    Ops, MPI collectives. runtime.strict_device=true selects the strict
//    CPU device instead (worker-thread streams, NaN-filled allocations).
//  - cuda: a shared library (libscaletrain_cuda.so, built from kernels/cuda
//    when the CUDA toolkit is found) loaded the first time
//    runtime.device=cuda asks for it, so CPU ranks and the analysis never
//    load a CUDA library. A missing or broken library is a one-line
//    UsageError naming it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "config/config.hpp"
#include "core/ranges.hpp"
#include "kernels/ops.hpp"
#include "tensor/device.hpp"

namespace st {

// The peak MFU is reported against, when the backend knows it.
struct DevicePeak {
  double flops = 0;    // per rank
  std::string source;  // where the figure comes from
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cpu-strict", "cuda"
  // What of a schema-valid config this backend cannot run: "" or the reason,
  // naming the key and what would be valid. Touches no device (a dry run
  // asks it on a machine without GPUs).
  virtual std::string supports(const Config& cfg) const = 0;
  // This rank's device: picks it and checks it; "" or the reason. Call on
  // every rank, before device(): the CUDA backend compares the node's GPUs
  // by PCI bus id across its ranks (collective over MPI_COMM_WORLD when MPI
  // is initialised) and refuses a GPU two ranks would share.
  virtual std::string preflight(const Config& cfg, int local_rank, int local_size) = 0;
  virtual Device& device() = 0;
  virtual Ops& ops() = 0;
  // Makes, at once and at start, the device communicator of every group a
  // run will use, and returns them in the order given. Collective over every
  // rank of the world: each rank hands over, entry by entry, the group it
  // belongs to for the same role in the same order (the engine's: dp x cp,
  // tp, cp, then each pipeline link), so the k-th entries of all ranks
  // partition the world. A group is a host group of the mesh or a dup of
  // one: an MpiCommunicator for the CPU and CUDA backends, a recording one
  // for the recording backend. The CUDA backend splits them all from one
  // world NCCL communicator (ncclCommSplit, planned by
  // kernels/cuda/host/nccl_split.hpp); the CPU backend binds each group to
  // its device and checks over each group that every member handed it over
  // as the same entry (a mismatch is an Error naming the entry). Taking the
  // seam type keeps this header, the model and the backends that need no
  // MPI free of it.
  virtual std::vector<Communicator*> make_communicators(
      const std::vector<Communicator*>& groups) = 0;
  // The communicator make_communicators made for `group` (owned by the
  // backend). Creates nothing: a group that was not handed over at start is
  // an Error, so no communicator is ever made lazily in the middle of a run.
  virtual Communicator& communicator(Communicator& group) = 0;
  // The peak for MFU (nullopt: the trainer measures the CPU's sgemm rate).
  virtual std::optional<DevicePeak> peak(const Config& cfg) = 0;
  // False for a backend that records instead of computing (lib/record): the
  // model then skips drawing initial values on the host.
  virtual bool computes() const { return true; }
  // The profiler's ranges and capture (core/ranges.hpp): NVTX and
  // cudaProfilerStart/Stop on CUDA; nullptr where there is no device profiler.
  virtual ranges::Sink* ranges() { return nullptr; }
};

Backend& cpu_backend(bool strict = false);
// The backend runtime.device (and runtime.strict_device) name; loads the
// CUDA library on first use. Throws UsageError when it cannot be had.
Backend& backend_for(const Config& cfg);
// Where the CUDA backend library is looked for: $SCALETRAIN_BACKEND_DIR, or
// the folder this library (libst_backend.so) was loaded from.
std::string cuda_backend_path();

constexpr const char* kCudaBackendFile = "libscaletrain_cuda.so";
}  // namespace st

// The C function table a backend library exports (kBackendTableSymbol, a
// function returning it): a fixed C layout across dlopen, checked before
// any C++ object crosses. seam_hash is SCALETRAIN_SEAM_HASH of the
// library's build, a hash of the seam headers made at configure time
// (lib/backend/seam_hash.hpp.in); the loader refuses a library whose hash
// differs from its own, naming the file (a stale library from another tree).
extern "C" {
struct ScaletrainBackendTable {
  uint32_t table_bytes;   // sizeof(ScaletrainBackendTable) of the library
  const char* seam_hash;  // the library's SCALETRAIN_SEAM_HASH
  const char* name;       // "cuda"
  // The backend (an st::Backend*, process lifetime), or null with the
  // reason written into why (NUL-terminated, at most why_bytes).
  void* (*create)(char* why, size_t why_bytes);
};
typedef const ScaletrainBackendTable* (*ScaletrainBackendTableFn)(void);
}

namespace st {
constexpr const char* kBackendTableSymbol = "scaletrain_backend_table";
}  // namespace st
