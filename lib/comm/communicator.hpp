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
// Every collective is counted (calls, bytes, seconds) per kind and kept in
// the flight recorder, by the front (Communicator's public methods, below):
// the implementations (MPI, NCCL, the recording one) only issue a checked,
// normalised Collective and return its op.
//
// Scalars (the loss, the gradient norm, start-up agreement) stay on the MPI
// host groups: MpiCommunicator's blocking host methods (mpi_communicator.hpp).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/poll_wait.hpp"
#include "core/step_parts.hpp"
#include "tensor/device.hpp"
#include "tensor/dtype.hpp"

namespace st {

class MpiCommunicator;  // comm/mpi_communicator.hpp: the MPI groups (a HostGroup)
class Communicator;
namespace flight {
struct Ring;  // runtime/flight_recorder.hpp
}

enum class CollKind { AllReduce = 0, ReduceScatter, AllGather, Broadcast, SendRecv, kCount };

// One row per collective kind (nccl-tests keeps byte count, bus-bandwidth
// factor and call together, src/common.h): the front counts bytes by it, the
// statistics and the flight recorder name by it, and the planner prices by
// its ring factors (lib/plan/rates.cpp). Bytes are nccl-tests' "size": the
// element count the row names times the element size.
struct CollRow {
  CollKind kind;
  const char* name;    // "all_reduce", ...: statistics, telemetry, the planner
  const char* flight;  // the flight recorder's op name
  // nccl-tests' bus-bandwidth factor over n ranks (busbw = algbw x factor),
  // and the latency steps of its ring: time = bytes x bus / bw + steps x alpha.
  double (*bus)(int n);
  double (*steps)(int n);
};
const CollRow& coll_row(CollKind k);
const char* coll_name(CollKind k);

struct CollStats {
  double seconds = 0;
  int64_t bytes = 0;  // payload bytes per rank, nccl-tests "size" (all_reduce: buffer size)
  int64_t calls = 0;
  // Seconds the host blocked waiting for them (CommHandle::wait, a wait on an
  // inline stream): the exposed part on CPU ranks; 0 where a device stream
  // waits instead. host_s: the same for blocking collectives of host values.
  double wait_s = 0, host_s = 0;
};

enum class ReduceOp { Sum, Max };

// The mesh axis a group spans (torchtitan's parallel_dims: typed, never
// recovered from a group's name): set by the mesh (parallel/mesh.hpp) on
// every group it makes, kept by dup_group (the pipeline's links are dups of
// the pp group) and by the device communicators made on a group; the
// recording backend records it with each collective, and the planner prices
// (kind, axis, bytes) by it (lib/plan/step_time.cpp).
enum class Axis : uint8_t {
  None = 0,  // not a mesh group (the world, a test's group)
  Tp,        // tensor (and sequence) parallel: consecutive ranks
  Cp,        // context parallel: the ring attention's ring
  Dp,        // data parallel
  DpCp,      // dp x cp: where gradients are summed and ZeRO shards live
  Pp,        // pipeline: the stage links (and the pp host group)
};
const char* axis_name(Axis a);  // "none", "tp", "cp", "dp", "dp_cp", "pp"
// The part of a step a collective belongs to (core/step_parts.hpp), by its
// group's axis: tp, cp, pp; on dp/dp_cp (and groups of no axis) an
// all_gather is zero (ZeRO's parameter gathers), the rest dp (gradient
// reductions); the blocking collectives of host values (loss, norm, votes)
// are other.
CommPart comm_part(Axis a, CollKind k, bool host);

struct GroupAxis {
  Axis axis = Axis::None;
  int stride = 1;           // world-rank distance between consecutive members (tp innermost)
  bool intra_node = false;  // every member on one node (where the ranks run, or the
                            // recorded mesh's stated node size)
};
// (The planner finds whether a group spans nodes from its members and the
// cluster's placement, lib/plan/step_time.cpp group_nodes; a job's MPI groups
// know intra_node from where they run.)

// One side of a point-to-point exchange.
struct P2POp {
  bool send = false;
  void* buf = nullptr;  // device buffer (read for a send, written for a receive)
  int64_t n = 0;        // elements
  int peer = 0;         // rank within the group
};

// A collective as the front hands it to an implementation: checked (counts
// match the group, peers inside it, no negative sizes), never degenerate
// (the group has 2+ ranks and something moves), its bytes counted.
struct Collective {
  CollKind kind = CollKind::AllReduce;
  DType t = DType::F32;
  ReduceOp op = ReduceOp::Sum;  // all_reduce
  const void* send = nullptr;   // all_reduce, broadcast: = recv
  void* recv = nullptr;
  int64_t n = 0;                                 // all_reduce, broadcast: elements
  const std::vector<int64_t>* counts = nullptr;  // reduce_scatter, all_gather: per rank
  int64_t total = 0;                             // their sum (elements)
  int64_t mine = 0;                              // elements before this rank's part
  bool in_place = false;                         // all_gather: send is this rank's part of recv
  int root = 0;                                  // broadcast
  const std::vector<P2POp>* ops = nullptr;       // exchange
  bool receives = false;                         // exchange: one of ops receives
  int64_t bytes = 0;                             // by the kind's row
  bool host = false;                             // on host buffers, blocking (HostGroup)
  int tag = -1;                                  // host send/recv: MPI's tag (-1: the seam's)
  // Set by the front: the flight recorder's name and sequence number.
  const char* what = "";
  uint64_t seq = 0;
};

// An operation in flight. An implementation derives from it; the front
// (Communicator) fills the fields of its base part (from the Collective) and
// closes it: on the first poll or host wait that finds it done, or when the
// implementation reports it done (finish(): a worker stream, NCCL's reaper,
// the recorder at once), its statistic is added and its flight-recorder
// entry closed, once.
class CommOp {
 public:
  // For collective c on communicator comm (the front's part from c).
  CommOp(Communicator& comm, const Collective& c);
  virtual ~CommOp() = default;
  // Implementations: is it done (cheap, never blocks)?
  virtual bool test() = 0;
  // Implementations: make stream s wait for it.
  virtual void wait_stream(Stream& s) = 0;
  // Seconds from launch to completion once complete (0 when not known).
  virtual double seconds() { return 0; }
  // The recording backend's ops complete when waited for, yet a poll finds
  // them in flight: they wait for the host themselves (no poll loop).
  virtual bool waits_itself() { return false; }
  virtual void wait_self() {}

  // ---- the front's part ----
  // Started on its stream (the flight recorder's "started").
  void started();
  // Done: the statistic added and the entry closed, once, from any thread.
  void finish();
  bool finished() const { return done_.load(std::memory_order_acquire); }
  Communicator& comm() const { return *comm_; }
  CollKind kind() const { return kind_; }
  int64_t bytes() const { return bytes_; }
  const char* what() const { return what_; }

 private:
  friend class Communicator;
  Communicator* comm_;
  CollKind kind_ = CollKind::AllReduce;
  int64_t bytes_ = 0;
  const char* what_ = "";
  uint64_t seq_ = 0;
  bool ring_ = false;  // has a flight-recorder entry
  bool host_ = false;  // a blocking collective of host values (Collective::host)
  std::atomic<bool> done_{false};
};

class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<CommOp> op) : op_(std::move(op)) {}
  bool valid() const { return op_ != nullptr; }
  bool test();
  void wait();  // the host waits (the front's poll loop)
  void wait(Stream& s);
  double seconds() { return op_ ? op_->seconds() : 0.0; }

 private:
  std::shared_ptr<CommOp> op_;
};

// counts of `size` equal parts of n elements each.
std::vector<int64_t> equal_counts(int size, int64_t n);

// What every wait answers while it polls, process-wide: the run-time
// watchdog's poll (set by the MPI layer, lib/comm/mpi_communicator.cpp; the
// seam itself names no MPI). `doing` says what the rank waits in.
using WaitAnswer = void (*)(const std::string& doing);
void set_wait_answer(WaitAnswer f);

// The front: every collective of every implementation goes through these
// public methods, which check the arguments, apply the degenerate rules (a
// group of one copies locally, a collective with nothing to move makes no
// call), count the bytes by the kind's row, open the flight-recorder entry,
// and hand a normalised Collective to the implementation's issue(). Waits on
// the handle poll through the one wait loop (core/poll_wait.hpp), answering
// the watchdog and applying timeout_s(); completion adds the statistic and
// closes the entry. The public methods are virtual only so a test can wrap
// a communicator; implementations override issue() and copy_local().
class Communicator {
 public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "tp", "dp_cp", ...

  // In place over n elements.
  virtual CommHandle all_reduce(void* buf, int64_t n, DType t, ReduceOp op, Stream& after);
  // Sum-reduce `send` (sum(counts) elements, rank-ordered parts) and leave
  // this rank's part (counts[rank()] elements) in `recv`.
  virtual CommHandle reduce_scatter(const void* send, void* recv,
                                    const std::vector<int64_t>& counts, DType t, Stream& after);
  // Every rank's part (counts[r] elements from `send` on rank r) into `recv`
  // in rank order. In place when send == recv + offset of this rank's part.
  // The same on host buffers, blocking (as the host reductions: the
  // watchdog's timeout and the flight recorder apply).
  void all_gather_host(const void* send, void* recv, const std::vector<int64_t>& counts, DType t);
  virtual CommHandle all_gather(const void* send, void* recv, const std::vector<int64_t>& counts,
                                DType t, Stream& after);
  // n elements of `root`'s buf into every rank's buf.
  virtual CommHandle broadcast(void* buf, int64_t n, DType t, int root, Stream& after);
  // Sends and receives started together (a ring shift, a pipeline hand-off).
  // In a group of one, the k-th receive gets the k-th send (a local copy).
  virtual CommHandle exchange(const std::vector<P2POp>& ops, DType t, Stream& after);
  CommHandle send(const void* buf, int64_t n, DType t, int peer, Stream& after);
  CommHandle recv(void* buf, int64_t n, DType t, int peer, Stream& after);

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
  double timeout_s() const { return timeout_s_; }
  void set_timeout(double s) { timeout_s_ = s; }
  // Unique in the process and never reused (an address can be, once freed):
  // what a backend keys the communicators it made by.
  uint64_t uid() const { return uid_; }
  // The mesh axis it spans (Axis::None unless the mesh set it).
  const GroupAxis& axis() const { return axis_; }
  void set_axis(const GroupAxis& a) { axis_ = a; }
  // This communicator's flight-recorder ring (null when recording is off).
  flight::Ring* flight_ring() const { return ring_.get(); }

  // The host waits for op through the one poll loop (CommHandle::wait).
  void wait_host(CommOp& op);

 protected:
  // ---- what an implementation supplies ----
  // Starts c, ordered after *after (c.host, after == nullptr: on host
  // buffers, now, on the calling thread), and returns its op (constructed
  // with *this). Nothing else: the front has checked, counted and recorded.
  virtual std::shared_ptr<CommOp> issue(const Collective& c, Stream* after);
  // A device copy of `bytes` ordered after `after` (a group of one).
  virtual void copy_local(void* dst, const void* src, size_t bytes, Stream& after);
  // Called while a host wait polls (with the watchdog answered): may throw
  // or abort (NCCL's asynchronous error).
  virtual void check_waiting(const char* /*what*/) {}
  // How the wait polls (core/poll_wait.hpp; default: spin, then sleep
  // 100 us), asked before it starts and then every answer_every_s.
  virtual void pace(PollPolicy&) {}
  // A wait for `what` passed timeout_s(): say who is stuck and end the job
  // (or throw). The default throws Error naming the group and the op.
  virtual void timed_out(const char* what, int64_t bytes, double waited);
  // The one wait loop: polls done() answering the watchdog (set_wait_answer),
  // check_waiting() and the timeout; for waits that are no collective of
  // the seam (MPI's barrier, the clock ping), and the worker streams' waits.
  void poll_until(const char* what, int64_t bytes, const std::function<bool()>& done);

  // Joins the flight recorder (in the implementation's constructor):
  // `world_ranks` are the members in group rank order.
  void join_flight(const std::vector<int>& world_ranks);
  // A blocking collective on host buffers (a HostGroup's scalars): through
  // the same checks, counts, recorder and wait as the device ones.
  void run_host(Collective c);

  double timeout_s_ = 600.0;

 private:
  friend class CommOp;
  CommHandle start(Collective& c, Stream* after);
  void add_stat(CollKind k, int64_t bytes, double s);
  void add_wait(CollKind k, bool host, double s);
  static uint64_t next_uid();
  mutable std::mutex stats_mu_;
  std::array<CollStats, size_t(CollKind::kCount)> stats_{};
  std::shared_ptr<flight::Ring> ring_;
  GroupAxis axis_;
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

// Every member's bytes in rank order, by two blocking host all-gathers on g
// (the lengths, then the bytes). Collective over g.
std::vector<std::string> all_gather_strings(Communicator& g, const std::string& mine);

}  // namespace st
