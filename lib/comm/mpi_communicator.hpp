// MpiCommunicator: the MPI implementation of the Communicator seam
// (communicator.hpp) on CPU device buffers, and the blocking host
// collectives (scalars, start-up agreement) every MPI group carries. Kept
// apart from the seam so the code that only uses the seam (the model, the
// planner's recording backend) compiles without mpi.h.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace st {
struct MpiPosted;  // what a collective posted (mpi_communicator.cpp)

class MpiCommunicator final : public HostGroup {
 public:
  // Takes ownership of `comm` (freed in the destructor) unless it is MPI_COMM_WORLD.
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  ~MpiCommunicator() override;
  // A sub-communicator of ranks sharing `color`, ordered by `key`.
  std::unique_ptr<MpiCommunicator> split(int color, int key, const std::string& name) const;
  // The members that share this one's host (memory), in this group's order.
  std::unique_ptr<MpiCommunicator> split_host(const std::string& name) const;
  std::unique_ptr<MpiCommunicator> dup(const std::string& name) const;
  std::unique_ptr<HostGroup> dup_group(const std::string& name) const override { return dup(name); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  MPI_Comm mpi() const { return comm_; }
  // Its members' world ranks in group rank order (the flight recorder's).
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // Large all-reduces (chunks of 256 KiB a rank and more), reduce-scatters
  // (64 KiB) and all-gathers (1 MiB, 3 ranks and more) go round the
  // communicator's own ring of point-to-point messages instead of MPI's
  // non-blocking call (mpi_communicator.cpp, Ring); off, always MPI's call.
  // Process-wide, and the same on every rank (each decides alone): the
  // trainer sets it from runtime.mpi_ring (the measurement behind it:
  // scripts/bench-mpi-ring.sh), the probe's comparison against MPI's own
  // algorithms (scaletrain-plan-probe --compare-mpi) switches it.
  static void set_rings(bool on);

  // The device whose buffers the device collectives below see (default: the
  // default CPU device). On a device with worker streams (the strict CPU
  // device) the collectives run on this communicator's own stream.
  void bind(Device& dev) override;

  // ---- Blocking host collectives (host buffers). ----
  void all_reduce_sum(double* buf, int64_t n) override;
  void all_reduce_max(double* buf, int64_t n) override;
  void all_reduce_sum(float* buf, int64_t n) override;
  void broadcast_bytes(void* buf, int64_t n, int root);
  void barrier();
  using Communicator::recv;
  using Communicator::send;
  void send(const float* buf, int64_t n, int peer, int tag);
  void recv(float* buf, int64_t n, int peer, int tag);

  // Waits for req through the front's loop with this communicator's
  // timeout; on expiry prints who waited for what and aborts the job
  // (MPI_Abort), never hangs. Not counted: for what is no collective of the
  // seam (the barrier, the clock ping).
  void wait_request(MPI_Request* req, const char* what);

  // ---- Host exchanges that give up (mpi_vote.cpp) ----
  // For waits off the step's critical path (the checkpoint commit vote on
  // the writer thread): each polls with a growing sleep instead of spinning
  // and waits at most timeout_s. On expiry it asks the members whether they
  // are alive (runtime/watchdog.hpp: a silent one aborts the job, named);
  // when all answer it returns false, and this communicator must not be
  // used again (the request is abandoned).
  bool try_all_reduce_min(int* v, double timeout_s, const char* what);
  // Rank `root` gets every rank's `mine` in rank order in *all.
  bool try_gather(const std::string& mine, std::vector<std::string>* all, int root,
                  double timeout_s, const char* what);
  bool try_broadcast(int* v, int root, double timeout_s, const char* what);
  static bool thread_multiple();  // MPI runs at MPI_THREAD_MULTIPLE

 protected:
  // The front's implementation part (communicator.hpp).
  std::shared_ptr<CommOp> issue(const Collective& c, Stream* after) override;
  void copy_local(void* dst, const void* src, size_t bytes, Stream& after) override;
  void pace(PollPolicy& p) override;
  void timed_out(const char* what, int64_t bytes, double waited) override;

 private:
  void post(const Collective& c, MpiPosted& ps, int ring_tag);
  int ring_tag(const Collective& c);
  void host(CollKind k, void* buf, int64_t n, DType t, ReduceOp op, int root = 0);
  void p2p(bool send, float* buf, int64_t n, int peer, int tag);
  bool wait_patiently(MPI_Request* r, double timeout_s, const char* what);
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  Device* dev_ = nullptr;
  std::unique_ptr<Stream> stream_;  // own stream on worker-stream devices
  uint64_t rings_ = 0;              // rings issued (their tags, ring_tag)
};
}  // namespace st
