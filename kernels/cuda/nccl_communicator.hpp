// The NCCL implementation of the Communicator seam (lib/comm/communicator.hpp)
// for the CUDA backend: one ncclComm per MPI group, all split at start from
// one world communicator (split_communicators below, planned on the host by
// host/nccl_split.hpp), each with its own non-blocking, high-priority stream.
//
//  - Every collective waits (cudaStreamWaitEvent) for an event recorded on
//    `after` when it is called, then runs on the communicator's stream
//    between a start and an end event; its handle tests / waits on the end
//    event (wait(stream) is a cudaStreamWaitEvent, so the compute stream can
//    go on until it needs the result), and seconds() is the device time
//    between the two events.
//  - reduce_scatter and all_gather with unequal per-rank counts are a group
//    of ncclReduce to each root / ncclBroadcast from each root; equal counts
//    use ncclReduceScatter / ncclAllGather. exchange is a group of
//    ncclSend/ncclRecv (NCCL matches them in order per peer, the seam's rule).
//  - The Communicator front (lib/comm/communicator.hpp) checks, counts,
//    resolves a group of one (no NCCL communicator: no-ops or device copies
//    on `after`) and opens the flight-recorder entry; this class only issues.
//  - Statistics (calls, bytes, device seconds per kind) and the flight
//    recorder's started/done are reported when a collective is seen started
//    or finished (host/nccl_inflight.hpp): by its handle, by the watchdog,
//    and after every host synchronisation of the compute stream (so a
//    step's figures are complete once the engine has synchronised), so a
//    GPU hang's dump lists the NCCL collectives.
//  - Never hangs: a watchdog thread polls ncclCommGetAsyncError and the
//    oldest unfinished collective; on an NCCL error, or when a collective has
//    run longer than timeout_s() since it started on the device, it prints
//    a message naming host, rank, group and collective, aborts the NCCL
//    communicator and ends the job (MPI_Abort). Host waits (handle.wait(),
//    the front's poll loop) apply the same checks. Creating the communicators (ncclCommInitRank of
//    the world, ncclCommSplit) is blocking and not covered by the timeout.
#pragma once
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/host/nccl_inflight.hpp"

namespace st::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // For `group`, owning `comm` (made by split_communicators; null for a
  // group of one rank); uses `dev` (current on this thread).
  NcclCommunicator(MpiCommunicator& group, CudaDevice& dev, ncclComm_t comm);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  // Counts the collectives that have finished into the statistics (and the
  // flight recorder): the front's finish, through InFlight.
  void reap();

  class Op;  // one collective in flight (nccl_communicator.cpp)

 protected:
  // The front's implementation part (lib/comm/communicator.hpp).
  std::shared_ptr<CommOp> issue(const Collective& c, Stream* after) override;
  void copy_local(void* dst, const void* src, size_t bytes, Stream& after) override;
  void check_waiting(const char* what) override { check_async(what); }
  void timed_out(const char* what, int64_t bytes, double waited) override;

 private:
  void check_async(const char* when);
  [[noreturn]] void fail(const std::string& why);
  void watch();

  CudaDevice& dev_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<CudaEvent> ready_;  // recorded on `after`, waited for by stream_
  std::mutex mu_;                     // stop_
  std::condition_variable cv_;
  std::unique_ptr<cuda_host::InFlight<Op>> pending_;
  bool stop_ = false;
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

// The communicators of `groups` (this rank's MPI groups, one per role in the
// order every rank hands them over: Backend::make_communicators), in that
// order, each split from `world` by the plan of host/nccl_split.hpp. `world`
// is made on the first call (ncclCommInitRank over MPI_COMM_WORLD, rank 0's
// unique id broadcast; none for a world of one rank) and kept by the caller.
// Collective over MPI_COMM_WORLD.
std::vector<std::unique_ptr<NcclCommunicator>> split_communicators(
    const std::vector<MpiCommunicator*>& groups, CudaDevice& dev, ncclComm_t& world);
}  // namespace st::cuda
