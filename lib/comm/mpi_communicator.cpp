// MPI implementation of Communicator (see communicator.hpp). Collectives
// are started non-blocking and waited on with a timeout, so a dead peer
// turns into an error that names the group and rank rather than a hang.
// Device collectives follow the bound device's streams: on the default CPU
// device they start at once on the calling thread; on a device with worker
// streams (the strict CPU device) they run on this communicator's own
// stream, after an event of the producing stream, exactly as NCCL runs on
// its stream on a GPU. bf16 sums and maxima use MPI user operations that
// add in fp32 and round once per pairwise step (NCCL's bf16 reduction).
#include "comm/mpi_communicator.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "runtime/watchdog.hpp"

namespace st {

namespace {
constexpr int kP2PTag = 0x5353;  // one tag: k-th receive matches k-th send

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    if (bf16_to_f32(a[i]) > bf16_to_f32(b[i])) b[i] = a[i];
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::BF16:
      return MPI_UINT16_T;
    case DType::F64:
      return MPI_DOUBLE;
    default:
      return MPI_INT32_T;
  }
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  if (t != DType::BF16) return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
  static MPI_Op sum = MPI_OP_NULL, mx = MPI_OP_NULL;
  static std::once_flag once;
  std::call_once(once, [] {
    ST_MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &sum));
    ST_MPI_CHECK(MPI_Op_create(&bf16_max, 1, &mx));
  });
  return op == ReduceOp::Sum ? sum : mx;
}

int as_count(int64_t n) {
  ST_CHECK(n >= 0 && n <= INT_MAX, "message of ", n, " elements exceeds the MPI count limit");
  return int(n);
}

// Requests posted on the calling thread: polled by the front.
class RequestOp final : public CommOp {
 public:
  RequestOp(MpiCommunicator& c, const Collective& k) : CommOp(c, k), t0_(wall_time()) {}
  bool test() override {
    if (done_) return true;
    int flag = 0;
    ST_MPI_CHECK(MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      done_ = true;
      dur_ = wall_time() - t0_;
    }
    return flag != 0;
  }
  void wait_stream(Stream& s) override {
    if (s.runs_inline()) {
      comm().wait_host(*this);
      return;
    }
    s.enqueue([keep = self.lock()] { keep->comm().wait_host(*keep); });
  }
  double seconds() override { return dur_; }
  std::vector<MPI_Request> reqs;
  std::weak_ptr<RequestOp> self;

 private:
  double t0_, dur_ = 0;
  bool done_ = false;
};

// Work run on the communicator's worker stream; completion is an event on
// that stream, and the worker closes the op when its requests are done.
class EventOp final : public CommOp {
 public:
  EventOp(MpiCommunicator& c, const Collective& k, std::unique_ptr<Event> e)
      : CommOp(c, k), e(std::move(e)) {}
  bool test() override { return e->query(); }
  void wait_stream(Stream& s) override { s.wait(*e); }
  double seconds() override { return dur.load(); }
  std::unique_ptr<Event> e;
  std::atomic<double> dur{0};
  std::vector<MPI_Request> reqs;
};
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : comm_(comm), name_(std::move(name)) {
  timeout_s_ = timeout_s;
  ST_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ST_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  dev_ = &cpu_device();
  // Its members' world ranks, for the flight recorder's hang report.
  MPI_Group mine, world;
  ST_MPI_CHECK(MPI_Comm_group(comm_, &mine));
  ST_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> in(static_cast<size_t>(size_)), out(static_cast<size_t>(size_));
  for (int i = 0; i < size_; ++i) in[size_t(i)] = i;
  ST_MPI_CHECK(MPI_Group_translate_ranks(mine, size_, in.data(), world, out.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  world_ranks_ = out;
  join_flight(out);
  static std::once_flag answer_once;  // waits answer the watchdog (communicator.hpp)
  std::call_once(answer_once, [] { set_wait_answer(&watchdog::poll); });
}

MpiCommunicator::~MpiCommunicator() {
  stream_.reset();  // drains its work first
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        const std::string& name) const {
  MPI_Comm sub;
  ST_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  auto c = std::make_unique<MpiCommunicator>(sub, name, timeout_s_);
  if (dev_) c->bind(*dev_);
  return c;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split_host(const std::string& name) const {
  MPI_Comm sub;
  ST_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub));
  auto c = std::make_unique<MpiCommunicator>(sub, name, timeout_s_);
  if (dev_) c->bind(*dev_);
  return c;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::dup(const std::string& name) const {
  MPI_Comm d;
  ST_MPI_CHECK(MPI_Comm_dup(comm_, &d));
  auto c = std::make_unique<MpiCommunicator>(d, name, timeout_s_);
  c->set_axis(axis());  // the same ranks: the same axis
  if (dev_) c->bind(*dev_);
  return c;
}

void MpiCommunicator::bind(Device& dev) {
  ST_CHECK(dev.host_memory(), "communicator '", name_,
           "': MPI needs host memory (a CPU device), not ", dev.id());
  if (dev_ == &dev) return;
  dev_ = &dev;
  stream_.reset();
  if (!dev.compute_stream().runs_inline()) stream_ = dev.create_stream("comm:" + name_);
}

namespace {
std::atomic<bool> g_sleep_when_waiting{false};

// More threads runnable on this machine right now than it has online CPUs
// (the fourth field of /proc/loadavg, "runnable/total"): other work is
// waiting for a core, so a rank that spins takes it from them, and from the
// peers it waits for. False where unknown. Read at most every 50 ms.
bool machine_busy() {
  static std::atomic<double> last{-1};
  static std::atomic<bool> busy{false};
  const double now = wall_time();
  if (now - last.load(std::memory_order_relaxed) < 0.05)
    return busy.load(std::memory_order_relaxed);
  last.store(now, std::memory_order_relaxed);
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return false;
  double avg[3];
  int runnable = 0, total = 0;
  const bool ok =
      std::fscanf(f, "%lf %lf %lf %d/%d", &avg[0], &avg[1], &avg[2], &runnable, &total) == 5;
  std::fclose(f);
  busy.store(ok && cpus > 0 && runnable > cpus, std::memory_order_relaxed);
  return busy.load(std::memory_order_relaxed);
}
}  // namespace

void MpiCommunicator::set_sleep_when_waiting(bool on) { g_sleep_when_waiting = on; }
bool MpiCommunicator::sleep_when_waiting() { return g_sleep_when_waiting; }

// How MPI waits poll (the front's loop, core/poll_wait.hpp): spin (MPI's
// way on dedicated cores) or, with sleep_when_waiting or the machine busy
// with more runnable threads than CPUs, after the first millisecond sleep 5%
// of the wait so far, at most 5 ms: hundreds of oversubscribed ranks polling
// every few microseconds swamp the scheduler and take the cores from the
// ranks they wait for; on a machine shared with other jobs a spinning rank
// does the same to its peers (measured: ZeRO 3 at dp 2 spent ~16% of its CPU
// in sched_yield and the kernel under load 17 on 2 cores). Sleeping also
// delays the polls that move a large message's fragments, so it is only for
// ranks that outnumber cores or share them. Asked at the start and every
// 50 ms; the watchdog is answered every 50 ms, not at the first unfinished
// poll (with hundreds of local peers each MPI call runs a costly progress
// pass, and most waits end within microseconds).
void MpiCommunicator::pace(PollPolicy& p) {
  p.answer_first = false;
  if (g_sleep_when_waiting.load(std::memory_order_relaxed) || machine_busy()) {
    p.spins = 0;
    p.spin_s = 1e-3;
    p.sleep_s = 0;
    p.sleep_frac = 0.05;
    p.sleep_max_s = 5e-3;
  } else {
    p.spins = LONG_MAX;
  }
}

void MpiCommunicator::timed_out(const char* what, int64_t, double) {
  // Name the member that is stuck, not only the one that waited.
  watchdog::on_timeout(comm_, what, name_, timeout_s_, true);
}

void MpiCommunicator::wait_request(MPI_Request* req, const char* what) {
  poll_until(what, 0, [req] {
    int done = 0;
    ST_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    return done != 0;
  });
}

// Posts c's non-blocking MPI calls into reqs.
void MpiCommunicator::post(const Collective& c, std::vector<MPI_Request>& reqs) {
  const MPI_Datatype t = mpi_type(c.t);
  switch (c.kind) {
    case CollKind::AllReduce:
      reqs.emplace_back();
      ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, c.recv, as_count(c.n), t, mpi_op(c.t, c.op), comm_,
                                  &reqs.back()));
      break;
    case CollKind::Broadcast:
      reqs.emplace_back();
      ST_MPI_CHECK(MPI_Ibcast(c.recv, as_count(c.n), t, c.root, comm_, &reqs.back()));
      break;
    case CollKind::ReduceScatter: {
      std::vector<int> n;
      for (int64_t x : *c.counts) n.push_back(as_count(x));
      reqs.emplace_back();
      ST_MPI_CHECK(MPI_Ireduce_scatter(c.send, c.recv, n.data(), t, mpi_op(c.t, ReduceOp::Sum),
                                       comm_, &reqs.back()));
      break;
    }
    case CollKind::AllGather: {
      std::vector<int> n, displ;
      int64_t at = 0;
      for (int64_t x : *c.counts) {
        displ.push_back(as_count(at));
        n.push_back(as_count(x));
        at += x;
      }
      reqs.emplace_back();
      ST_MPI_CHECK(MPI_Iallgatherv(c.in_place ? MPI_IN_PLACE : c.send, n[size_t(rank_)], t, c.recv,
                                   n.data(), displ.data(), t, comm_, &reqs.back()));
      break;
    }
    case CollKind::SendRecv: {
      const int tag = c.tag >= 0 ? c.tag : kP2PTag;
      for (const P2POp& o : *c.ops) {
        reqs.emplace_back();
        if (o.send)
          ST_MPI_CHECK(MPI_Isend(o.buf, as_count(o.n), t, o.peer, tag, comm_, &reqs.back()));
        else
          ST_MPI_CHECK(MPI_Irecv(o.buf, as_count(o.n), t, o.peer, tag, comm_, &reqs.back()));
      }
      break;
    }
    default:
      ST_CHECK(false, "MPI: no call for collective ", coll_name(c.kind));
  }
}

std::shared_ptr<CommOp> MpiCommunicator::issue(const Collective& c, Stream* after) {
  if (!after || after->runs_inline()) {
    auto op = std::make_shared<RequestOp>(*this, c);
    op->self = op;
    post(c, op->reqs);
    return op;
  }
  ST_CHECK(dev_ && stream_, "communicator '", name_, "' is not bound to the device of stream '",
           after->name(), "'");
  // On the worker stream, after `after`: the arguments are copied (the
  // caller's counts and ops need not outlive the call).
  auto ready = dev_->create_event();
  ready->record(*after);
  stream_->wait(*ready);
  auto op = std::make_shared<EventOp>(*this, c, dev_->create_event());
  Collective k = c;
  std::vector<int64_t> counts = c.counts ? *c.counts : std::vector<int64_t>{};
  std::vector<P2POp> ops = c.ops ? *c.ops : std::vector<P2POp>{};
  stream_->enqueue([this, op, k, counts = std::move(counts), ops = std::move(ops)]() mutable {
    k.counts = &counts;
    k.ops = &ops;
    const double t0 = wall_time();
    op->started();
    post(k, op->reqs);
    poll_until(k.what, k.bytes, [&] {
      int flag = 0;
      ST_MPI_CHECK(MPI_Testall(int(op->reqs.size()), op->reqs.data(), &flag, MPI_STATUSES_IGNORE));
      return flag != 0;
    });
    op->dur = wall_time() - t0;
    op->finish();
  });
  op->e->record(*stream_);
  return op;
}

void MpiCommunicator::copy_local(void* dst, const void* src, size_t bytes, Stream& after) {
  dev_->copy(dst, src, bytes, after);
}

// ---- host collectives: through the front, blocking ----
void MpiCommunicator::host(CollKind k, void* buf, int64_t n, DType t, ReduceOp op, int root) {
  Collective c;
  c.kind = k;
  c.t = t;
  c.op = op;
  c.send = c.recv = buf;
  c.n = n;
  c.root = root;
  run_host(c);
}

void MpiCommunicator::all_reduce_sum(double* buf, int64_t n) {
  host(CollKind::AllReduce, buf, n, DType::F64, ReduceOp::Sum);
}

void MpiCommunicator::all_reduce_max(double* buf, int64_t n) {
  host(CollKind::AllReduce, buf, n, DType::F64, ReduceOp::Max);
}

void MpiCommunicator::all_reduce_sum(float* buf, int64_t n) {
  host(CollKind::AllReduce, buf, n, DType::F32, ReduceOp::Sum);
}

void MpiCommunicator::broadcast_bytes(void* buf, int64_t n, int root) {
  // The seam has no byte dtype: whole 32-bit words, then the tail padded
  // into one word.
  char* p = static_cast<char*>(buf);
  const int64_t words = n / 4, tail = n % 4;
  host(CollKind::Broadcast, p, words, DType::I32, ReduceOp::Sum, root);
  if (tail) {
    char w[4] = {};
    std::memcpy(w, p + words * 4, size_t(tail));
    host(CollKind::Broadcast, w, 1, DType::I32, ReduceOp::Sum, root);
    std::memcpy(p + words * 4, w, size_t(tail));
  }
}

void MpiCommunicator::p2p(bool send, float* buf, int64_t n, int peer, int tag) {
  std::vector<P2POp> ops{P2POp{send, buf, n, peer}};
  Collective c;
  c.kind = CollKind::SendRecv;
  c.ops = &ops;
  c.n = n;
  c.tag = tag;
  run_host(c);
}

void MpiCommunicator::send(const float* buf, int64_t n, int peer, int tag) {
  p2p(true, const_cast<float*>(buf), n, peer, tag);
}

void MpiCommunicator::recv(float* buf, int64_t n, int peer, int tag) {
  p2p(false, buf, n, peer, tag);
}

void MpiCommunicator::barrier() {
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  wait_request(&r, "barrier");
}
}  // namespace st
