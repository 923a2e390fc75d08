// MPI implementation of Communicator (see communicator.hpp). Collectives are
// started non-blocking and waited on with a timeout, so a dead peer turns
// into an error that names the group and rank rather than a hang.
#include <sched.h>

#include <climits>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "runtime/watchdog.hpp"

namespace st {

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::AllReduce: return "all_reduce";
    case CollKind::ReduceScatter: return "reduce_scatter";
    case CollKind::AllGather: return "all_gather";
    case CollKind::Broadcast: return "broadcast";
    case CollKind::SendRecv: return "send_recv";
    default: return "?";
  }
}

double busbw_factor(CollKind k, int n) {
  if (n <= 1) return 1.0;
  switch (k) {
    case CollKind::AllReduce: return 2.0 * (n - 1) / n;
    case CollKind::ReduceScatter:
    case CollKind::AllGather: return double(n - 1) / n;
    default: return 1.0;
  }
}

void CommHandle::wait() {
  if (req_ == MPI_REQUEST_NULL) return;
  auto* mc = static_cast<MpiCommunicator*>(comm_);
  mc->wait_request(&req_, coll_name(kind_));
  comm_->add_stat(kind_, bytes_, wall_time() - t0_);
}

bool CommHandle::test() {
  if (req_ == MPI_REQUEST_NULL) return true;
  int done = 0;
  ST_MPI_CHECK(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
  if (done) comm_->add_stat(kind_, bytes_, wall_time() - t0_);
  return done != 0;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : comm_(comm), name_(std::move(name)) {
  timeout_s_ = timeout_s;
  ST_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ST_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        const std::string& name) const {
  MPI_Comm sub;
  ST_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, name, timeout_s_);
}

void MpiCommunicator::wait_request(MPI_Request* req, const char* what) {
  double t0 = wall_time();
  int done = 0;
  long spins = 0;
  while (true) {
    ST_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if ((++spins & 1023) == 0) {
      const std::string doing = std::string(what) + " on group '" + name_ + "'";
      watchdog::poll(doing);  // answer peers that ask whether this rank is alive
      // Name the member that is stuck, not only the one that waited.
      if (wall_time() - t0 > timeout_s_) watchdog::on_timeout(comm_, what, name_, timeout_s_, true);
    }
    sched_yield();
  }
}

static void check_count(int64_t n) {
  ST_CHECK(n >= 0 && n <= INT_MAX, "message of ", n, " elements exceeds the MPI count limit");
}

CommHandle MpiCommunicator::start(MPI_Request req, CollKind k, int64_t bytes) {
  CommHandle h;
  h.req_ = req;
  h.comm_ = this;
  h.kind_ = k;
  h.bytes_ = bytes;
  h.t0_ = wall_time();
  return h;
}

CommHandle MpiCommunicator::all_reduce_sum_async(float* buf, int64_t n) {
  check_count(n);
  MPI_Request r;
  double t0 = wall_time();
  ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, int(n), MPI_FLOAT, MPI_SUM, comm_, &r));
  auto h = start(r, CollKind::AllReduce, n * 4);
  h.t0_ = t0;
  return h;
}

void MpiCommunicator::all_reduce_sum(float* buf, int64_t n) {
  if (size_ == 1) return;
  all_reduce_sum_async(buf, n).wait();
}

void MpiCommunicator::all_reduce_doubles(double* buf, int64_t n, MPI_Op op) {
  if (size_ == 1) return;
  check_count(n);
  double t0 = wall_time();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, int(n), MPI_DOUBLE, op, comm_, &r));
  wait_request(&r, "all_reduce");
  add_stat(CollKind::AllReduce, n * 8, wall_time() - t0);
}

void MpiCommunicator::all_reduce_sum(double* buf, int64_t n) { all_reduce_doubles(buf, n, MPI_SUM); }

void MpiCommunicator::all_reduce_max(double* buf, int64_t n) { all_reduce_doubles(buf, n, MPI_MAX); }

CommHandle MpiCommunicator::reduce_scatter_sum_async(const float* send, float* recv, int64_t n) {
  check_count(n);
  double t0 = wall_time();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, int(n), MPI_FLOAT, MPI_SUM, comm_, &r));
  auto h = start(r, CollKind::ReduceScatter, n * 4 * size_);
  h.t0_ = t0;
  return h;
}

void MpiCommunicator::reduce_scatter_sum(const float* send, float* recv, int64_t n) {
  reduce_scatter_sum_async(send, recv, n).wait();
}

void MpiCommunicator::all_gather(const float* send, float* recv, int64_t n) {
  check_count(n);
  double t0 = wall_time();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Iallgather(send, int(n), MPI_FLOAT, recv, int(n), MPI_FLOAT, comm_, &r));
  wait_request(&r, "all_gather");
  add_stat(CollKind::AllGather, n * 4 * size_, wall_time() - t0);
}

void MpiCommunicator::broadcast(float* buf, int64_t n, int root) {
  broadcast_bytes(buf, n * 4, root);
}

void MpiCommunicator::broadcast_bytes(void* buf, int64_t n, int root) {
  if (size_ == 1) return;
  check_count(n);
  double t0 = wall_time();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibcast(buf, int(n), MPI_BYTE, root, comm_, &r));
  wait_request(&r, "broadcast");
  add_stat(CollKind::Broadcast, n, wall_time() - t0);
}

void MpiCommunicator::send(const float* buf, int64_t n, int peer, int tag) {
  check_count(n);
  double t0 = wall_time();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Isend(buf, int(n), MPI_FLOAT, peer, tag, comm_, &r));
  wait_request(&r, "send");
  add_stat(CollKind::SendRecv, n * 4, wall_time() - t0);
}

void MpiCommunicator::recv(float* buf, int64_t n, int peer, int tag) {
  check_count(n);
  double t0 = wall_time();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Irecv(buf, int(n), MPI_FLOAT, peer, tag, comm_, &r));
  wait_request(&r, "recv");
  add_stat(CollKind::SendRecv, n * 4, wall_time() - t0);
}

void MpiCommunicator::barrier() {
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  wait_request(&r, "barrier");
}
}  // namespace st
