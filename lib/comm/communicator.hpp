// Communicator: the collectives a training step needs, over one process
// group. MpiCommunicator carries them on CPU ranks (host buffers); the CUDA
// backend adds an NCCL one behind the same interface. Every collective is
// counted (calls, bytes, seconds) per kind, with nccl-tests' algbw/busbw
// conventions available for reports, and every wait has a timeout: a peer
// that never arrives aborts the job with a message naming the group and rank
// instead of hanging.
#pragma once
#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace st {

enum class CollKind { AllReduce = 0, ReduceScatter, AllGather, Broadcast, SendRecv, kCount };
const char* coll_name(CollKind k);

struct CollStats {
  double seconds = 0;
  int64_t bytes = 0;  // payload bytes per rank, nccl-tests "size" (all_reduce: buffer size)
  int64_t calls = 0;
};

// nccl-tests bus-bandwidth factor for a collective over n ranks.
double busbw_factor(CollKind k, int n);

class Communicator;

// Handle of a non-blocking collective; wait() blocks (with the timeout).
class CommHandle {
 public:
  CommHandle() = default;
  bool valid() const { return req_ != MPI_REQUEST_NULL; }
  void wait();  // no-op if invalid
  bool test();
 private:
  friend class MpiCommunicator;
  MPI_Request req_ = MPI_REQUEST_NULL;
  Communicator* comm_ = nullptr;
  CollKind kind_ = CollKind::AllReduce;
  int64_t bytes_ = 0;
  double t0_ = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "world", "dp", "tp", ...

  // In place sum (or average) over the group.
  virtual void all_reduce_sum(float* buf, int64_t n) = 0;
  virtual CommHandle all_reduce_sum_async(float* buf, int64_t n) = 0;
  virtual void all_reduce_sum(double* buf, int64_t n) = 0;
  virtual void all_reduce_max(double* buf, int64_t n) = 0;
  // send holds size()*n elements; recv gets this rank's n-element block of the sum.
  virtual void reduce_scatter_sum(const float* send, float* recv, int64_t n) = 0;
  virtual CommHandle reduce_scatter_sum_async(const float* send, float* recv, int64_t n) = 0;
  // send holds n elements; recv gets size()*n (rank-ordered blocks).
  virtual void all_gather(const float* send, float* recv, int64_t n) = 0;
  virtual void broadcast(float* buf, int64_t n, int root) = 0;
  virtual void broadcast_bytes(void* buf, int64_t n, int root) = 0;
  virtual void send(const float* buf, int64_t n, int peer, int tag) = 0;
  virtual void recv(float* buf, int64_t n, int peer, int tag) = 0;
  virtual void barrier() = 0;

  const CollStats& stats(CollKind k) const { return stats_[size_t(k)]; }
  void reset_stats() { stats_ = {}; }
  void add_stat(CollKind k, int64_t bytes, double s) {
    auto& st = stats_[size_t(k)];
    st.seconds += s;
    st.bytes += bytes;
    st.calls += 1;
  }
  double timeout_s() const { return timeout_s_; }
  void set_timeout(double s) { timeout_s_ = s; }

 protected:
  std::array<CollStats, size_t(CollKind::kCount)> stats_{};
  double timeout_s_ = 600.0;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor) unless it is MPI_COMM_WORLD.
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  ~MpiCommunicator() override;
  // A sub-communicator of ranks sharing `color`, ordered by `key`.
  std::unique_ptr<MpiCommunicator> split(int color, int key, const std::string& name) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  MPI_Comm mpi() const { return comm_; }

  void all_reduce_sum(float* buf, int64_t n) override;
  CommHandle all_reduce_sum_async(float* buf, int64_t n) override;
  void all_reduce_sum(double* buf, int64_t n) override;
  void all_reduce_max(double* buf, int64_t n) override;
  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override;
  CommHandle reduce_scatter_sum_async(const float* send, float* recv, int64_t n) override;
  void all_gather(const float* send, float* recv, int64_t n) override;
  void broadcast(float* buf, int64_t n, int root) override;
  void broadcast_bytes(void* buf, int64_t n, int root) override;
  void send(const float* buf, int64_t n, int peer, int tag) override;
  void recv(float* buf, int64_t n, int peer, int tag) override;
  void barrier() override;

  // Waits for req with this communicator's timeout; on expiry prints who
  // waited for what and aborts the job (MPI_Abort), never hangs.
  void wait_request(MPI_Request* req, const char* what);

 private:
  CommHandle start(MPI_Request req, CollKind k, int64_t bytes);
  void all_reduce_doubles(double* buf, int64_t n, MPI_Op op);
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
};
}  // namespace st
