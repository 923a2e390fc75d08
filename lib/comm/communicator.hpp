// The Communicator seam: the collectives a training step runs over one
// process group, on a device's buffers, each returning an asynchronous
// handle. MpiCommunicator (mpi_communicator.hpp) carries them on CPU ranks;
// the CUDA backend library supplies an NCCL one behind the same interface,
// and lib/record a recording one for the planner. This header names no MPI
// type, so code that only uses the seam builds and links without MPI.
// The model's tensor/sequence/context parallelism, the gradient buckets,
// ZeRO-3's gathers and the pipeline's point-to-point traffic all go through
// here; the checkpoint vote through MpiCommunicator's host exchanges. Outside
// lib/comm only lib/runtime (start-up, the watchdog, the flight recorder)
// and the planner's probe (analysis/probe) call MPI directly.
//
// Semantics (every implementation):
//  - A collective runs after everything enqueued on `after` (the stream that
//    produced its input) when it was called; handle.wait(s) makes stream s
//    wait for its completion, handle.wait() makes the host wait,
//    handle.test() polls. On the default CPU device (inline streams) the
//    collective starts at once and waiting blocks the host.
//  - Collectives on one communicator execute in the order they were called,
//    and every rank of the group must call them in the same order.
//  - Point-to-point messages carry no tag: between two ranks, the k-th
//    receive matches the k-th send (NCCL's rule; the MPI implementation uses
//    one tag so CPU runs obey it too). Give separate message streams their own
//    communicators.
//  - Nothing waits forever: a collective that does not finish within
//    timeout_s() aborts the job with a message naming the group, the rank
//    and the collective.
// Every collective is counted (calls, bytes, seconds) per kind.
//
// Scalars (the loss, the gradient norm, start-up agreement) stay on the MPI
// host groups: MpiCommunicator's blocking host methods (mpi_communicator.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/device.hpp"
#include "tensor/dtype.hpp"

namespace st {

class MpiCommunicator;  // comm/mpi_communicator.hpp: the MPI groups (a HostGroup)

enum class CollKind { AllReduce = 0, ReduceScatter, AllGather, Broadcast, SendRecv, kCount };
const char* coll_name(CollKind k);

struct CollStats {
  double seconds = 0;
  int64_t bytes = 0;  // payload bytes per rank, nccl-tests "size" (all_reduce: buffer size)
  int64_t calls = 0;
};

enum class ReduceOp { Sum, Max };

// An operation in flight (implementations: MPI request, worker-stream event,
// CUDA event).
class CommOp {
 public:
  virtual ~CommOp() = default;
  virtual bool test() = 0;
  virtual void wait_host() = 0;
  virtual void wait_stream(Stream& s) = 0;
  // Seconds from launch to completion once complete (0 when not known).
  virtual double seconds() { return 0; }
};

class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<CommOp> op) : op_(std::move(op)) {}
  bool valid() const { return op_ != nullptr; }
  bool test() { return !op_ || op_->test(); }
  void wait() {
    if (op_) op_->wait_host();
  }
  void wait(Stream& s) {
    if (op_) op_->wait_stream(s);
  }
  double seconds() { return op_ ? op_->seconds() : 0.0; }

 private:
  std::shared_ptr<CommOp> op_;
};

// One side of a point-to-point exchange.
struct P2POp {
  bool send = false;
  void* buf = nullptr;  // device buffer (read for a send, written for a receive)
  int64_t n = 0;        // elements
  int peer = 0;         // rank within the group
};

// counts of `size` equal parts of n elements each.
std::vector<int64_t> equal_counts(int size, int64_t n);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "tp", "dp_cp", ...

  // In place over n elements.
  virtual CommHandle all_reduce(void* buf, int64_t n, DType t, ReduceOp op, Stream& after) = 0;
  // Sum-reduce `send` (sum(counts) elements, rank-ordered parts) and leave
  // this rank's part (counts[rank()] elements) in `recv`.
  virtual CommHandle reduce_scatter(const void* send, void* recv,
                                    const std::vector<int64_t>& counts, DType t, Stream& after) = 0;
  // Every rank's part (counts[r] elements from `send` on rank r) into `recv`
  // in rank order. In place when send == recv + offset of this rank's part.
  virtual CommHandle all_gather(const void* send, void* recv, const std::vector<int64_t>& counts,
                                DType t, Stream& after) = 0;
  // Sends and receives started together (a ring shift, a pipeline hand-off).
  virtual CommHandle exchange(const std::vector<P2POp>& ops, DType t, Stream& after) = 0;

  // The device whose buffers the device collectives see. A communicator made
  // for one device (NCCL, the recording one) ignores it; a host group that
  // also carries device collectives (MPI on CPU buffers) starts using it.
  virtual void bind(Device&) {}

  // Blocking for stream s (s waits; on inline streams the host waits).
  void all_reduce_on(Stream& s, void* buf, int64_t n, DType t, ReduceOp op = ReduceOp::Sum) {
    all_reduce(buf, n, t, op, s).wait(s);
  }

  // Read and reset between steps, when no collective is in flight; added to
  // from communication streams.
  CollStats stats(CollKind k) const {
    std::lock_guard<std::mutex> g(stats_mu_);
    return stats_[size_t(k)];
  }
  void reset_stats() {
    std::lock_guard<std::mutex> g(stats_mu_);
    stats_ = {};
  }
  void add_stat(CollKind k, int64_t bytes, double s) {
    std::lock_guard<std::mutex> g(stats_mu_);
    auto& st = stats_[size_t(k)];
    st.seconds += s;
    st.bytes += bytes;
    st.calls += 1;
  }
  double timeout_s() const { return timeout_s_; }
  void set_timeout(double s) { timeout_s_ = s; }
  // Unique in the process and never reused (an address can be, once freed):
  // what a backend keys the communicators it made by.
  uint64_t uid() const { return uid_; }

 protected:
  mutable std::mutex stats_mu_;
  std::array<CollStats, size_t(CollKind::kCount)> stats_{};
  double timeout_s_ = 600.0;

 private:
  static uint64_t next_uid();
  const uint64_t uid_ = next_uid();
};

// A process group's host side, beside its device collectives: blocking
// collectives of host values (the loss, the gradient norm, agreement) and
// further groups over the same ranks (separate message orders). The mesh's
// groups are HostGroups: MpiCommunicator for a real job, the recording
// backend's for a step that runs without processes.
class HostGroup : public Communicator {
 public:
  virtual void all_reduce_sum(double* buf, int64_t n) = 0;
  virtual void all_reduce_max(double* buf, int64_t n) = 0;
  virtual void all_reduce_sum(float* buf, int64_t n) = 0;
  virtual std::unique_ptr<HostGroup> dup_group(const std::string& name) const = 0;
};

// Checks, by one host all-reduce over each HostGroup of 2+ ranks in list
// order, that every member of groups[k] has it as its k-th entry with the
// same name (Backend::make_communicators' rule); throws Error naming the
// entry otherwise. Collective over each group.
void check_same_entries(const std::vector<Communicator*>& groups);

}  // namespace st
