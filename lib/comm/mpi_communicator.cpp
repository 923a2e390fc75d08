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
#include <functional>
#include <mutex>
#include <unordered_map>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "runtime/flight_recorder.hpp"
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

// Each communicator's ring in the flight recorder (runtime/flight_recorder.hpp),
// by address: kept here rather than in the class so the seam header is
// unchanged. -1 when the recorder is off.
std::mutex g_flight_mu;
std::unordered_map<const MpiCommunicator*, int> g_flight_ids;

int flight_id(const MpiCommunicator* c) {
  std::lock_guard<std::mutex> lk(g_flight_mu);
  auto it = g_flight_ids.find(c);
  return it == g_flight_ids.end() ? -1 : it->second;
}

// Requests posted on the calling thread; completion polled or waited for.
class RequestOp final : public CommOp {
 public:
  RequestOp(MpiCommunicator* c, std::vector<MPI_Request> reqs, CollKind k, int64_t bytes,
            const char* what, double t0, uint64_t seq)
      : c_(c), reqs_(std::move(reqs)), kind_(k), bytes_(bytes), what_(what), t0_(t0), seq_(seq) {}
  bool test() override {
    if (done_) return true;
    int flag = 0;
    ST_MPI_CHECK(MPI_Testall(int(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) finish();
    return flag != 0;
  }
  void wait_host() override {
    if (done_) return;
    c_->wait_requests(reqs_, what_);
    finish();
  }
  void wait_stream(Stream& s) override {
    if (s.runs_inline()) {
      wait_host();
      return;
    }
    s.enqueue([this, keep = self_.lock()] { wait_host(); });
  }
  double seconds() override { return dur_; }
  std::weak_ptr<RequestOp> self_;

 private:
  void finish() {
    done_ = true;
    dur_ = wall_time() - t0_;
    c_->add_stat(kind_, bytes_, dur_);
    flight::finish(flight_id(c_), seq_);
  }
  MpiCommunicator* c_;
  std::vector<MPI_Request> reqs_;
  CollKind kind_;
  int64_t bytes_;
  const char* what_;
  double t0_;
  uint64_t seq_;
  double dur_ = 0;
  bool done_ = false;
};

// Work run on a worker stream; completion is an event on that stream.
class EventOp final : public CommOp {
 public:
  EventOp(std::unique_ptr<Event> e, std::shared_ptr<std::atomic<double>> dur)
      : e_(std::move(e)), dur_(std::move(dur)) {}
  bool test() override { return e_->query(); }
  void wait_host() override { e_->synchronize(); }
  void wait_stream(Stream& s) override { s.wait(*e_); }
  double seconds() override { return e_->query() ? dur_->load() : 0.0; }

 private:
  std::unique_ptr<Event> e_;
  std::shared_ptr<std::atomic<double>> dur_;
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
  const int id = flight::add_comm(name_, out);
  std::lock_guard<std::mutex> lk(g_flight_mu);
  g_flight_ids[this] = id;
}

MpiCommunicator::~MpiCommunicator() {
  stream_.reset();  // drains its work first
  {
    std::lock_guard<std::mutex> lk(g_flight_mu);
    g_flight_ids.erase(this);
  }
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

std::unique_ptr<MpiCommunicator> MpiCommunicator::dup(const std::string& name) const {
  MPI_Comm d;
  ST_MPI_CHECK(MPI_Comm_dup(comm_, &d));
  auto c = std::make_unique<MpiCommunicator>(d, name, timeout_s_);
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
// peers it waits for. False where unknown.
bool machine_busy() {
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return false;
  double avg[3];
  int runnable = 0, total = 0;
  const bool ok =
      std::fscanf(f, "%lf %lf %lf %d/%d", &avg[0], &avg[1], &avg[2], &runnable, &total) == 5;
  std::fclose(f);
  return ok && cpus > 0 && runnable > cpus;
}
}  // namespace

void MpiCommunicator::set_sleep_when_waiting(bool on) { g_sleep_when_waiting = on; }
bool MpiCommunicator::sleep_when_waiting() { return g_sleep_when_waiting; }

void MpiCommunicator::wait_request(MPI_Request* req, const char* what) {
  double t0 = wall_time();
  int done = 0;
  long spins = 0;
  double last_check = t0;
  bool busy = false;  // machine_busy(), refreshed with the watchdog check
  while (true) {
    ST_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    // Spin, or (sleep_when_waiting, or the machine busy with more runnable
    // threads than CPUs) after the first millisecond sleep 5% of the wait so
    // far, at most 5 ms: hundreds of oversubscribed ranks polling every few
    // microseconds swamp the scheduler and take the cores from the ranks they
    // wait for; on a machine shared with other jobs a spinning rank does the
    // same to its peers (measured: ZeRO 3 at dp 2 spent ~16% of its CPU in
    // sched_yield and the kernel under load 17 on 2 cores). Sleeping also
    // delays the polls that move a large message's fragments, so it is only
    // for ranks that outnumber cores or share them.
    // While sleeping, the watchdog is answered and the timeout checked every
    // 50 ms (well within the watchdog's grace), not on every poll: with
    // hundreds of local peers each MPI call runs a costly progress pass.
    const double now = wall_time(), waited = now - t0;
    const bool sleeping =
        (busy || g_sleep_when_waiting.load(std::memory_order_relaxed)) && waited >= 1e-3;
    if (sleeping ? now - last_check >= 0.05 : (++spins & 1023) == 0) {
      last_check = now;
      busy = machine_busy();
      const std::string doing = std::string(what) + " on group '" + name_ + "'";
      watchdog::poll(doing);  // answer peers that ask whether this rank is alive
      // Name the member that is stuck, not only the one that waited.
      if (waited > timeout_s_) watchdog::on_timeout(comm_, what, name_, timeout_s_, true);
    }
    if (!sleeping) {
      sched_yield();
    } else {
      timespec ts{0, std::min(5'000'000L, long(waited * 5e7))};
      nanosleep(&ts, nullptr);
    }
  }
}

void MpiCommunicator::wait_requests(std::vector<MPI_Request>& reqs, const char* what) {
  for (auto& r : reqs) wait_request(&r, what);
}

CommHandle MpiCommunicator::launch(Stream& after, CollKind k, int64_t bytes, const char* what,
                                   std::function<void(std::vector<MPI_Request>&)> start) {
  const int fid = flight_id(this);
  const uint64_t seq = flight::enqueue(fid, what, bytes);
  if (after.runs_inline()) {
    const double t0 = wall_time();
    std::vector<MPI_Request> reqs;
    start(reqs);
    auto op = std::make_shared<RequestOp>(this, std::move(reqs), k, bytes, what, t0, seq);
    op->self_ = op;
    return CommHandle(op);
  }
  ST_CHECK(dev_ && stream_, "communicator '", name_, "' is not bound to the device of stream '",
           after.name(), "'");
  auto ready = dev_->create_event();
  ready->record(after);
  stream_->wait(*ready);
  auto dur = std::make_shared<std::atomic<double>>(0.0);
  stream_->enqueue([this, k, bytes, what, dur, fid, seq, start = std::move(start)] {
    const double t0 = wall_time();
    flight::start(fid, seq);
    std::vector<MPI_Request> reqs;
    start(reqs);
    wait_requests(reqs, what);
    dur->store(wall_time() - t0);
    add_stat(k, bytes, dur->load());
    flight::finish(fid, seq);
  });
  auto done = dev_->create_event();
  done->record(*stream_);
  return CommHandle(std::make_shared<EventOp>(std::move(done), std::move(dur)));
}

CommHandle MpiCommunicator::all_reduce(void* buf, int64_t n, DType t, ReduceOp op, Stream& after) {
  if (size_ == 1 || n == 0) return {};
  const int cnt = as_count(n);
  return launch(after, CollKind::AllReduce, n * int64_t(dtype_size(t)), "all_reduce",
                [=, this](std::vector<MPI_Request>& r) {
                  r.emplace_back();
                  ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, cnt, mpi_type(t), mpi_op(t, op),
                                              comm_, &r.back()));
                });
}

CommHandle MpiCommunicator::reduce_scatter(const void* send, void* recv,
                                           const std::vector<int64_t>& counts, DType t,
                                           Stream& after) {
  ST_CHECK(int(counts.size()) == size_, "reduce_scatter on '", name_, "': ", counts.size(),
           " counts for ", size_, " ranks");
  const size_t es = dtype_size(t);
  if (size_ == 1) {
    if (counts[0] && dev_ && send != recv) dev_->copy(recv, send, size_t(counts[0]) * es, after);
    return {};
  }
  std::vector<int> c;
  int64_t total = 0;
  for (int64_t x : counts) c.push_back(as_count(x)), total += x;
  if (total == 0) return {};
  return launch(after, CollKind::ReduceScatter, total * int64_t(es), "reduce_scatter",
                [=, this](std::vector<MPI_Request>& r) {
                  r.emplace_back();
                  ST_MPI_CHECK(MPI_Ireduce_scatter(send, recv, c.data(), mpi_type(t),
                                                   mpi_op(t, ReduceOp::Sum), comm_, &r.back()));
                });
}

CommHandle MpiCommunicator::all_gather(const void* send, void* recv,
                                       const std::vector<int64_t>& counts, DType t, Stream& after) {
  ST_CHECK(int(counts.size()) == size_, "all_gather on '", name_, "': ", counts.size(),
           " counts for ", size_, " ranks");
  const size_t es = dtype_size(t);
  std::vector<int> c, displ;
  int64_t total = 0;
  for (int64_t x : counts) {
    displ.push_back(as_count(total));
    c.push_back(as_count(x));
    total += x;
  }
  char* mine = static_cast<char*>(recv) + size_t(displ[size_t(rank_)]) * es;
  const bool in_place = send == mine;
  if (size_ == 1) {
    if (!in_place && counts[0] && dev_) dev_->copy(mine, send, size_t(counts[0]) * es, after);
    return {};
  }
  if (total == 0) return {};
  return launch(
      after, CollKind::AllGather, total * int64_t(es), "all_gather",
      [=, this](std::vector<MPI_Request>& r) {
        r.emplace_back();
        ST_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, c[size_t(rank_)], mpi_type(t),
                                     recv, c.data(), displ.data(), mpi_type(t), comm_, &r.back()));
      });
}

CommHandle MpiCommunicator::exchange(const std::vector<P2POp>& ops, DType t, Stream& after) {
  if (ops.empty()) return {};
  int64_t bytes = 0;
  for (const P2POp& o : ops) {
    ST_CHECK(o.peer >= 0 && o.peer < size_, "exchange on '", name_, "': peer ", o.peer,
             " outside the group of ", size_);
    as_count(o.n);
    bytes += o.n * int64_t(dtype_size(t));
  }
  return launch(
      after, CollKind::SendRecv, bytes, "send/recv", [=, this](std::vector<MPI_Request>& r) {
        for (const P2POp& o : ops) {
          r.emplace_back();
          if (o.send)
            ST_MPI_CHECK(
                MPI_Isend(o.buf, int(o.n), mpi_type(t), o.peer, kP2PTag, comm_, &r.back()));
          else
            ST_MPI_CHECK(
                MPI_Irecv(o.buf, int(o.n), mpi_type(t), o.peer, kP2PTag, comm_, &r.back()));
        }
      });
}

// ---- host collectives ----

// Starts one non-blocking call on host buffers, waits for it with the
// timeout and counts it.
void MpiCommunicator::blocking(CollKind k, int64_t bytes, const char* what,
                               const std::function<void(MPI_Request*)>& start) {
  const double t0 = wall_time();
  const int fid = flight_id(this);
  const uint64_t seq = flight::enqueue(fid, what, bytes);
  MPI_Request r;
  start(&r);
  wait_request(&r, what);
  add_stat(k, bytes, wall_time() - t0);
  flight::finish(fid, seq);
}

void MpiCommunicator::all_reduce_doubles(double* buf, int64_t n, MPI_Op op) {
  if (size_ == 1) return;
  const int cnt = as_count(n);
  blocking(CollKind::AllReduce, n * 8, "all_reduce", [&](MPI_Request* r) {
    ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, cnt, MPI_DOUBLE, op, comm_, r));
  });
}

void MpiCommunicator::all_reduce_sum(double* buf, int64_t n) {
  all_reduce_doubles(buf, n, MPI_SUM);
}

void MpiCommunicator::all_reduce_max(double* buf, int64_t n) {
  all_reduce_doubles(buf, n, MPI_MAX);
}

void MpiCommunicator::all_reduce_sum(float* buf, int64_t n) {
  if (size_ == 1) return;
  const int cnt = as_count(n);
  blocking(CollKind::AllReduce, n * 4, "all_reduce", [&](MPI_Request* r) {
    ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, comm_, r));
  });
}

void MpiCommunicator::broadcast_bytes(void* buf, int64_t n, int root) {
  if (size_ == 1) return;
  const int cnt = as_count(n);
  blocking(CollKind::Broadcast, n, "broadcast",
           [&](MPI_Request* r) { ST_MPI_CHECK(MPI_Ibcast(buf, cnt, MPI_BYTE, root, comm_, r)); });
}

void MpiCommunicator::send(const float* buf, int64_t n, int peer, int tag) {
  const int cnt = as_count(n);
  blocking(CollKind::SendRecv, n * 4, "send", [&](MPI_Request* r) {
    ST_MPI_CHECK(MPI_Isend(buf, cnt, MPI_FLOAT, peer, tag, comm_, r));
  });
}

void MpiCommunicator::recv(float* buf, int64_t n, int peer, int tag) {
  const int cnt = as_count(n);
  blocking(CollKind::SendRecv, n * 4, "recv", [&](MPI_Request* r) {
    ST_MPI_CHECK(MPI_Irecv(buf, cnt, MPI_FLOAT, peer, tag, comm_, r));
  });
}

void MpiCommunicator::barrier() {
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  wait_request(&r, "barrier");
}
}  // namespace st
