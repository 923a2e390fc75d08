// NCCL communicator for the CUDA backend, behind the Communicator interface
// the CPU path uses. This header needs no CUDA: streams travel as opaque
// handles (a cudaStream_t), and a build without CUDA/NCCL links
// nccl_communicator_stub.cpp, whose factory throws "built without CUDA/NCCL"
// at the point of use (CMake picks the file; no #ifdef at call sites).
//
// Semantics on top of Communicator:
//  - Buffers are device pointers.
//  - Collectives run on the communicator's own stream, after everything
//    already enqueued on the compute stream (an event orders them), so
//    gradient buckets reduce while backward keeps computing.
//  - The blocking calls (all_reduce_sum, ...) return when the collective has
//    finished; the *_async and *_typed calls return at once, and wait_on()
//    makes a stream wait for them (their CommHandle is empty: there is
//    nothing for the host to wait on). synchronize() waits on the host.
//  - A watchdog thread polls ncclCommGetAsyncError and the age of the oldest
//    unfinished collective; on an NCCL error, or after timeout_s(), it prints
//    a message naming host, rank, group and collective, aborts the NCCL
//    communicator and ends the job (MPI_Abort), instead of hanging.
//  - send/recv ignore the tag: NCCL orders point-to-point traffic per peer.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace st {

enum class CommDType { F32, BF16 };  // gradient reduction precision

class DeviceCommunicator : public Communicator {
 public:
  using StreamHandle = void*;  // cudaStream_t

  // The stream the model computes on (default: the legacy default stream).
  virtual void set_compute_stream(StreamHandle compute) = 0;
  // The communicator's own stream.
  virtual StreamHandle stream() const = 0;
  // Make `s` wait (on the device) for every collective enqueued so far.
  virtual void wait_on(StreamHandle s) = 0;
  // Wait on the host for every collective enqueued so far (watchdog-bounded).
  virtual void synchronize() = 0;

  // Non-blocking, in place / into recv, in fp32 or bf16 (gradient buckets).
  virtual void all_reduce_sum_typed(void* buf, int64_t n, CommDType dt) = 0;
  virtual void all_reduce_max_typed(void* buf, int64_t n, CommDType dt) = 0;
  // send holds size()*n elements, recv gets this rank's n.
  virtual void reduce_scatter_sum_typed(const void* send, void* recv, int64_t n, CommDType dt) = 0;
  virtual void all_gather_typed(const void* send, void* recv, int64_t n, CommDType dt) = 0;

  // Sub-communicator of the ranks sharing `color`, ordered by `key`
  // (ncclCommSplit; collective over this communicator).
  virtual std::unique_ptr<DeviceCommunicator> split(int color, int key,
                                                    const std::string& name) = 0;

  // What the watchdog does after printing its message (default: abort the
  // MPI job). Tests replace it.
  virtual void set_abort_handler(std::function<void(const std::string&)> on_abort) = 0;
};

// True when this build has the NCCL communicator.
bool nccl_built();

// Collective over `bootstrap`'s ranks: rank 0 creates the NCCL unique id and
// broadcasts it over MPI; every rank uses its current CUDA device.
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(MpiCommunicator& bootstrap,
                                                           const std::string& name,
                                                           double timeout_s);
}  // namespace st
