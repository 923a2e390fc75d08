// The CUDA backend (lib/backend/backend.hpp) and the entry point of
// libscaletrain_cuda.so that lib/backend's loader looks up with dlsym:
// scaletrain_backend_table(), a C table with the build's seam hash. One object per process, never
// destroyed (CUDA and NCCL tear down with the process).
//
//  - supports: train.precision=bf16 only (the kernels store bf16
//    activations), and attention shapes the kernels can launch
//    (host/launch_limits.hpp: even head_dim <= 256, micro_batch x heads per
//    rank <= 65535); every layout the CPU backend runs is accepted.
//  - preflight: this rank's GPU (select_device: PCI bus ids compared across
//    the node's ranks, collective over them; a GPU two ranks would share is
//    refused by bus id; sm_80 or newer) and the peak MFU is reported
//    against (runtime.gpu_peak_tflops, else the device's dense bf16 row:
//    host/device_peak.hpp, by name and SM count); then the device and the Ops are created. The
//    bus-id exchange over MPI_COMM_WORLD is its only collective.
//  - make_communicators: one NcclCommunicator per MPI group handed over,
//    all split from one world NCCL communicator (nccl_communicator.hpp's
//    split_communicators), and kept until the group's MPI communicator is
//    freed: an MPI attribute with a delete callback drops it then, so a
//    group made later at the same address gets its own. communicator()
//    only looks them up.
//  - ranges: NVTX ranges of the phases and the profiler's capture window
//    (nvtx_ranges.hpp; the names and nesting come from core/ranges.hpp).
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/host/device_peak.hpp"
#include "kernels/cuda/host/supports.hpp"
#include "kernels/cuda/nccl_communicator.hpp"
#include "kernels/cuda/nvtx_ranges.hpp"
#include "scaletrain/seam_hash.hpp"

namespace st::cuda {
namespace {

// The device's SM count (0 when the query fails: the table's full-chip figure).
int sm_count(int ordinal) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string host_name() {
  char h[256] = {0};
  if (gethostname(h, sizeof h - 1) != 0) return "?";
  return h;
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }

  std::string supports(const Config& cfg) const override {
    if (cfg.train.precision != "bf16")
      return "runtime.device=cuda runs train.precision=bf16 (bf16 activations and compute "
             "weights; fp32 master weights, gradients and optimizer state); train.precision=" +
             cfg.train.precision + " is for runtime.device=cpu: set train.precision=bf16";
    return cuda_host::supports_shapes(cfg);
  }

  std::string preflight(const Config& cfg, int local_rank, int local_size) override {
    if (dev_) return "";  // chosen already (this process asked before)
    const std::string where = "runtime.device=cuda on host " + host_name() + " (node-local rank " +
                              std::to_string(local_rank) + " of " + std::to_string(local_size) +
                              "): ";
    int ordinal = 0;
    std::string name;
    // The node's ranks compare their GPUs (collective over the node-local
    // ranks of MPI_COMM_WORLD; a process without MPI is alone).
    // The exchange goes through the communicators' front (the collective
    // timeout and the flight recorder apply).
    int mpi_up = 0, mpi_down = 0;
    MPI_Initialized(&mpi_up);
    MPI_Finalized(&mpi_down);
    std::unique_ptr<MpiCommunicator> node;
    if (mpi_up && !mpi_down)
      node = MpiCommunicator(MPI_COMM_WORLD, "device select: world", cfg.runtime.timeout_s)
                 .split_host("device select: node");
    std::string why;
    try {
      why = select_device(node.get(), &ordinal, &name);
    } catch (const std::exception& e) {
      why = e.what();
    }
    node.reset();
    if (!why.empty()) return where + why + "; use runtime.device=cpu on a machine without GPUs";
    if (cfg.runtime.gpu_peak_tflops > 0) {
      peak_ = {cfg.runtime.gpu_peak_tflops * 1e12, "config runtime.gpu_peak_tflops"};
    } else if (auto p = cuda_host::gpu_bf16_peak(name, sm_count(ordinal))) {
      peak_ = {p->flops, p->source};
    } else {
      return where + "no dense bf16 peak FLOP/s is known for '" + name +
             "' (lib/metrics peak table); set runtime.gpu_peak_tflops to its dense bf16 TFLOP/s "
             "for MFU";
    }
    try {
      dev_ = std::make_unique<CudaDevice>(ordinal, name);
      ops_ = make_cuda_ops(*dev_, cfg.runtime.attention_backward == "deterministic");
    } catch (const std::exception& e) {
      ops_.reset();
      dev_.reset();
      return where + e.what();
    }
    return "";
  }

  Device& device() override {
    ST_CHECK(dev_ != nullptr, "runtime.device=cuda: the device is used before preflight()");
    return *dev_;
  }
  Ops& ops() override {
    ST_CHECK(ops_ != nullptr, "runtime.device=cuda: the ops are used before preflight()");
    return *ops_;
  }

  std::vector<Communicator*> make_communicators(const std::vector<Communicator*>& groups) override {
    device();  // preflight first
    std::vector<MpiCommunicator*> mpi;
    for (Communicator* g : groups) {
      auto* m = dynamic_cast<MpiCommunicator*>(g);
      ST_CHECK(m != nullptr,
               "runtime.device=cuda: NCCL communicators are made on MPI groups, not on '",
               g->name(), "'");
      mpi.push_back(m);
    }
    std::vector<Communicator*> out;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto made = split_communicators(mpi, *dev_, world_);
      // Finished collectives are counted when the compute stream is synchronised.
      if (!hooked_) dev_->after_sync([this] { reap_all(); });
      hooked_ = true;
      if (keyval_ == MPI_KEYVAL_INVALID)
        ST_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &on_comm_free, &keyval_, this));
      for (size_t k = 0; k < made.size(); ++k) {
        out.push_back(made[k].get());
        comms_.insert(comms_.begin(), {mpi[k]->mpi(), std::move(made[k])});  // newest first
      }
    }
    // Outside the lock: replacing a group's attribute drops its old communicator.
    for (size_t k = 0; k < out.size(); ++k)
      ST_MPI_CHECK(MPI_Comm_set_attr(mpi[k]->mpi(), keyval_, out[k]));
    return out;
  }

  Communicator& communicator(Communicator& host) override {
    auto* mpi = dynamic_cast<MpiCommunicator*>(&host);
    std::lock_guard<std::mutex> g(mu_);
    if (mpi)
      for (auto& e : comms_)
        if (e.key == mpi->mpi()) return *e.comm;
    throw Error("runtime.device=cuda: no NCCL communicator was made at start for '" + host.name() +
                "' (Backend::make_communicators); none is made lazily");
  }

  std::optional<DevicePeak> peak(const Config& cfg) override {
    if (dev_) return peak_;
    if (cfg.runtime.gpu_peak_tflops > 0)
      return DevicePeak{cfg.runtime.gpu_peak_tflops * 1e12, "config runtime.gpu_peak_tflops"};
    return std::nullopt;
  }

  // NVTX ranges and the profiler's capture window (nvtx_ranges.hpp).
  ranges::Sink* ranges() override { return &nvtx_; }

 private:
  struct Entry {
    MPI_Comm key;
    std::unique_ptr<NcclCommunicator> comm;
  };
  // MPI calls this when a group's communicator is freed (copy callback: none,
  // so MPI_Comm_dup'ed groups get their own NCCL communicator).
  static int on_comm_free(MPI_Comm, int, void* attr, void* self) {
    static_cast<CudaBackend*>(self)->drop(static_cast<NcclCommunicator*>(attr));
    return MPI_SUCCESS;
  }
  void drop(NcclCommunicator* c) {
    std::unique_ptr<NcclCommunicator> gone;  // destroyed outside the lock
    std::lock_guard<std::mutex> g(mu_);
    for (size_t i = 0; i < comms_.size(); ++i)
      if (comms_[i].comm.get() == c) {
        gone = std::move(comms_[i].comm);
        comms_.erase(comms_.begin() + long(i));
        break;
      }
  }
  void reap_all() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& e : comms_) e.comm->reap();
  }

  std::unique_ptr<CudaDevice> dev_;
  std::unique_ptr<Ops> ops_;
  DevicePeak peak_;
  std::mutex mu_;
  std::vector<Entry> comms_;
  ncclComm_t world_ = nullptr;  // the parent of every split (process lifetime)
  bool hooked_ = false;
  int keyval_ = MPI_KEYVAL_INVALID;
  NvtxRanges nvtx_;
};
}  // namespace
}  // namespace st::cuda

namespace {
void* create_cuda_backend(char* why, size_t why_bytes) {
  try {
    static st::Backend* backend = new st::cuda::CudaBackend();  // process lifetime
    return backend;
  } catch (const std::exception& e) {
    if (why && why_bytes) std::snprintf(why, why_bytes, "%s", e.what());
    return nullptr;
  }
}
const ScaletrainBackendTable kTable = {sizeof(ScaletrainBackendTable), SCALETRAIN_SEAM_HASH, "cuda",
                                       &create_cuda_backend};
}  // namespace

// The entry point lib/backend's loader looks up (backend.hpp): a C table
// whose seam hash the loader compares with its own before it calls create.
extern "C" __attribute__((visibility("default"))) const ScaletrainBackendTable*
scaletrain_backend_table(void) {
  return &kTable;
}
