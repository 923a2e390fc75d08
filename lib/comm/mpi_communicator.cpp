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

#include <time.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <functional>
#include <mutex>

#include "core/error.hpp"
#include "core/host.hpp"
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

// Scratch buffers for the rings, reused across calls (a fresh allocation
// per call pays its page faults, and a zeroed one a memset, on every
// gradient bucket): a ring takes what it needs and gives it back when done.
// At most kKeep are kept, the largest.
class ScratchPool {
 public:
  struct Buf {
    std::unique_ptr<char[]> p;
    size_t n = 0;
  };
  static ScratchPool& get() {
    static ScratchPool pool;
    return pool;
  }
  Buf take(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest kept buffer that holds n, else a new one (uninitialised).
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].n >= n && (best == free_.size() || free_[i].n < free_[best].n)) best = i;
    if (best == free_.size())
      return Buf{std::unique_ptr<char[]>(new char[std::max<size_t>(n, 1)]), n};
    Buf b = std::move(free_[best]);
    free_.erase(free_.begin() + long(best));
    return b;
  }
  void give(Buf b) {
    if (!b.p) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(b));
    std::sort(free_.begin(), free_.end(), [](const Buf& a, const Buf& c) { return a.n > c.n; });
    if (free_.size() > kKeep) free_.resize(kKeep);
  }

 private:
  static constexpr size_t kKeep = 4;
  std::mutex mu_;
  std::vector<Buf> free_;
};

// A ring over point-to-point messages, for large all-reduces,
// reduce-scatters and all-gathers: the data is cut into one chunk per rank;
// a reduce-scatter is p-1 rounds in which every rank sends one chunk to the
// next rank and adds the chunk it receives from the previous one into its
// own; an all-gather is p-1 rounds passing the finished chunks on; an
// all-reduce is both, in place. Each link carries (p-1)/p of the data per
// phase at once, every link busy every round (NCCL's and Gloo's ring). MPI's
// non-blocking calls do not do this everywhere: Open MPI's libnbc
// (MPI_Iallreduce, MPI_Ireduce_scatter) runs an in-place all-reduce, and
// any on fewer than 4 ranks, as a binomial reduce to rank 0 and a binomial
// broadcast, 2 log2(p) rounds of the whole message, and a reduce-scatter as
// a reduce and a scatter. Measured on the emulated cluster (1 Gbit/s links,
// 78.6 MB, one rank a node): the all-reduce at 4 nodes took 3.34 s that
// way and 1.08 s with libnbc's own ring forced, at 2 nodes 1.40 s and
// 0.68 s (near the links' rate). Round k+1 is posted by next() once round k's messages are complete
// and its received chunk is added, from the front's polls, so a ring moves
// only while its thread polls, as MPI's own requests do.
class Ring {
 public:
  // Also the index of kRingMinChunk.
  enum Kind { AllReduce, ReduceScatter, AllGather };
  // src: reduce-scatter, the whole input; all-gather, this rank's part (or
  // in place in dst). dst: all-reduce, the buffer (in place); reduce-
  // scatter, this rank's part; all-gather, the whole output. counts: each
  // rank's chunk in elements.
  Ring(Kind k, MPI_Comm comm, int rank, int p, int tag, MPI_Datatype t, MPI_Op op, size_t es,
       const void* src, void* dst, std::vector<int64_t> counts)
      : k_(k),
        comm_(comm),
        r_(rank),
        p_(p),
        tag_(tag),
        t_(t),
        op_(op),
        es_(es),
        src_(static_cast<const char*>(src)),
        dst_(static_cast<char*>(dst)),
        cnt_(std::move(counts)) {
    off_.assign(cnt_.size(), 0);
    for (size_t i = 1; i < cnt_.size(); ++i) off_[i] = off_[i - 1] + cnt_[i - 1];
    const int64_t most = *std::max_element(cnt_.begin(), cnt_.end());
    // All-reduce: [0] receives each round. Reduce-scatter: the partial sums
    // alternate, [1] in rounds 0, 2, ... and [0] in 1, 3, ...; the last
    // round receives into dst.
    const size_t bytes = size_t(most) * es_;
    if (k_ == AllReduce || (k_ == ReduceScatter && p_ > 3))
      tmp_[0] = ScratchPool::get().take(bytes);
    if (k_ == ReduceScatter && p_ > 2) tmp_[1] = ScratchPool::get().take(bytes);
    rounds_ = (k_ == AllReduce ? 2 : 1) * (p_ - 1);
    if (k_ == AllGather && src_ != part(dst_, r_))
      std::memcpy(part(dst_, r_), src_, size_t(cnt_[size_t(r_)]) * es_);
  }
  ~Ring() {
    for (auto& b : tmp_) ScratchPool::get().give(std::move(b));
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  // Completes the round whose messages have all arrived (adding what it
  // received) and posts the next round's into reqs; false when none is left.
  bool next(std::vector<MPI_Request>& reqs) {
    if (round_ > 0) finish(round_ - 1);
    if (round_ == rounds_) return false;
    post(round_++, reqs);
    return true;
  }

 private:
  int mod(int x) const { return ((x % p_) + p_) % p_; }
  char* part(char* base, int c) const { return base + size_t(off_[size_t(c)]) * es_; }
  const char* part(const char* base, int c) const { return base + size_t(off_[size_t(c)]) * es_; }
  bool reducing(int k) const { return k_ != AllGather && k < p_ - 1; }
  void post(int k, std::vector<MPI_Request>& reqs) {
    const int next = mod(r_ + 1), prev = mod(r_ - 1);
    int out, in;
    const void* from;
    void* to;
    if (reducing(k)) {
      // Round k: the partial sum of chunk r-k-1 goes on; chunk r-k-2's
      // comes in (after p-1 rounds, chunk r, complete).
      out = mod(r_ - k - 1), in = mod(r_ - k - 2);
      if (k_ == AllReduce) {
        from = part(dst_, out), to = tmp_[0].p.get();
      } else {
        // The last round receives straight into this rank's part.
        from = k == 0 ? part(src_, out) : tmp_[cur_].p.get();
        to = k == p_ - 2 ? dst_ : tmp_[1 - cur_].p.get();
      }
    } else {
      // Passing the finished chunks on: chunk r-g goes, chunk r-g-1 comes.
      const int g = k_ == AllReduce ? k - (p_ - 1) : k;
      out = mod(r_ - g), in = mod(r_ - g - 1);
      from = part(dst_, out), to = part(dst_, in);
    }
    in_ = in;
    reqs.resize(2);
    ST_MPI_CHECK(MPI_Irecv(to, as_count(cnt_[size_t(in)]), t_, prev, tag_, comm_, &reqs[1]));
    ST_MPI_CHECK(MPI_Isend(from, as_count(cnt_[size_t(out)]), t_, next, tag_, comm_, &reqs[0]));
  }
  void finish(int k) {
    if (!reducing(k)) return;
    const int n = as_count(cnt_[size_t(in_)]);
    if (k_ == AllReduce) {
      ST_MPI_CHECK(MPI_Reduce_local(tmp_[0].p.get(), part(dst_, in_), n, t_, op_));
      return;
    }
    char* got = k == p_ - 2 ? dst_ : tmp_[1 - cur_].p.get();
    ST_MPI_CHECK(MPI_Reduce_local(part(src_, in_), got, n, t_, op_));
    cur_ = 1 - cur_;
  }

  Kind k_;
  MPI_Comm comm_;
  int r_, p_, tag_;
  MPI_Datatype t_;
  MPI_Op op_;
  size_t es_;
  const char* src_;
  char* dst_;
  std::vector<int64_t> cnt_, off_;
  ScratchPool::Buf tmp_[2];
  int cur_ = 0;  // reduce-scatter: the tmp_ holding the partial sum to send
  int round_ = 0, rounds_ = 0, in_ = 0;
};

// Whether large collectives go round a ring (Ring) at all (the probe's
// --compare-mpi turns it off to time MPI's own calls).
std::atomic<bool> g_rings{true};
// The smallest chunk (bytes a rank) each kind goes round the ring with;
// below it the ring's 2(p-1) or p-1 rounds of latency, each moved on by a
// poll, cost more than the links it keeps busy. Measured on the emulated
// cluster (1 Gbit/s, 0.45 CPU a node; the trainer's / MPI's time,
// scaletrain-plan-probe --compare-mpi 1): a reduce-scatter gains from 64 KiB
// chunks (0.36-0.64 at 2 and 4 nodes; MPI reduces to one rank and
// scatters); an all-reduce at 64 KiB chunks on 4 nodes went 0.75-1.77 over
// three runs and gains from 1 MiB (0.33-0.36); an all-gather (MPI's posts
// every exchange at once: the same bytes a link, one round of latency; on
// 2 ranks the same exchange as the ring) gains on 4 nodes from 1 MiB
// (0.74-0.88) and not at 64 KiB (1.04-1.76).
constexpr int64_t kRingMinChunk[3] = {int64_t(256) << 10, int64_t(64) << 10, int64_t(1) << 20};
// The ring kind of a collective that has one (all-reduce, reduce-scatter,
// all-gather), else -1.
int ring_kind(CollKind k) {
  return k == CollKind::AllReduce       ? Ring::AllReduce
         : k == CollKind::ReduceScatter ? Ring::ReduceScatter
         : k == CollKind::AllGather     ? Ring::AllGather
                                        : -1;
}
// Ring messages use tags from here, one per ring in flight on a
// communicator (rings issued in the same order on every rank match by it).
constexpr int kRingTagBase = 0x6000, kRingTags = 0x1000;
}  // namespace

// What a collective posted: MPI requests and, for a ring, its later rounds.
struct MpiPosted {
  std::vector<MPI_Request> reqs;
  std::unique_ptr<Ring> ring;
  // Never blocks: true once every round is complete (each round found
  // complete posts the next).
  bool test() {
    for (;;) {
      int flag = 0;
      ST_MPI_CHECK(MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
      if (!flag) return false;
      reqs.clear();
      if (!ring || !ring->next(reqs)) return true;
    }
  }
};

namespace {
// Requests posted on the calling thread: polled by the front.
class RequestOp final : public CommOp {
 public:
  RequestOp(MpiCommunicator& c, const Collective& k) : CommOp(c, k), t0_(wall_time()) {}
  bool test() override {
    if (done_) return true;
    const bool flag = posted.test();
    if (flag) {
      done_ = true;
      dur_ = wall_time() - t0_;
    }
    return flag;
  }
  void wait_stream(Stream& s) override {
    if (s.runs_inline()) {
      comm().wait_host(*this);
      return;
    }
    s.enqueue([keep = self.lock()] { keep->comm().wait_host(*keep); });
  }
  double seconds() override { return dur_; }
  MpiPosted posted;
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
  MpiPosted posted;
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

void MpiCommunicator::set_rings(bool on) { g_rings = on; }

// How MPI waits poll (the front's loop, core/poll_wait.hpp): spin, MPI's
// way on dedicated cores, unless the host's CPUs are shared (pace_waits,
// core/host.hpp: then they sleep between polls). The watchdog is answered
// every 50 ms, not at the first unfinished poll: with hundreds of local
// peers each MPI call runs a costly progress pass, and most waits end
// within microseconds.
void MpiCommunicator::pace(PollPolicy& p) {
  p.answer_first = false;
  p.spins = LONG_MAX;
  pace_waits(p);
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

// Posts c's non-blocking MPI calls (or a ring's first round, with tag
// ring_tag) into ps.
void MpiCommunicator::post(const Collective& c, MpiPosted& ps, int ring_tag) {
  const MPI_Datatype t = mpi_type(c.t);
  if (ring_tag >= 0) {
    const auto k = Ring::Kind(ring_kind(c.kind));
    std::vector<int64_t> counts;
    if (c.kind == CollKind::AllReduce)
      for (int i = 0; i < size_; ++i) counts.push_back(c.n / size_ + (i < c.n % size_ ? 1 : 0));
    else
      counts = *c.counts;
    const ReduceOp op = c.kind == CollKind::AllReduce ? c.op : ReduceOp::Sum;
    ps.ring = std::make_unique<Ring>(k, comm_, rank_, size_, ring_tag, t, mpi_op(c.t, op),
                                     dtype_size(c.t), c.send, c.recv, std::move(counts));
    ps.ring->next(ps.reqs);
    return;
  }
  std::vector<MPI_Request>& reqs = ps.reqs;
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

// The ring's tag for c (Ring), or -1 for MPI's own call: large all-reduces,
// reduce-scatters and all-gathers on 2 ranks or more. Every rank decides
// alike (the sizes are the group's) and numbers its rings in issue order.
int MpiCommunicator::ring_tag(const Collective& c) {
  const int k = ring_kind(c.kind);
  if (k < 0 || size_ < 2 || c.host || !g_rings.load(std::memory_order_relaxed)) return -1;
  if (k == Ring::AllGather && size_ < 3) return -1;
  const int64_t elems = k == Ring::AllReduce ? c.n : c.total;
  if (elems * int64_t(dtype_size(c.t)) / size_ < kRingMinChunk[k]) return -1;
  return kRingTagBase + int(rings_++ % kRingTags);
}

std::shared_ptr<CommOp> MpiCommunicator::issue(const Collective& c, Stream* after) {
  const int tag = ring_tag(c);
  if (!after || after->runs_inline()) {
    auto op = std::make_shared<RequestOp>(*this, c);
    op->self = op;
    post(c, op->posted, tag);
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
  stream_->enqueue([this, op, k, tag, counts = std::move(counts), ops = std::move(ops)]() mutable {
    k.counts = &counts;
    k.ops = &ops;
    const double t0 = wall_time();
    op->started();
    post(k, op->posted, tag);
    poll_until(k.what, k.bytes, [&] { return op->posted.test(); });
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
