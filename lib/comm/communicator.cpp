// The Communicator front (communicator.hpp): the one place where a
// collective's arguments are checked, its degenerate forms resolved, its
// bytes counted by its kind's row, its statistic added, its flight-recorder
// entry opened and closed, and its host wait polled (core/poll_wait.hpp,
// answering the watchdog and runtime.timeout_s). MPI-free: MPI, NCCL and the
// recording backend only issue. Also the rows (nccl-tests' bus-bandwidth
// factors), equal part counts, and the check that every rank handed over
// its groups in one order.
#include "comm/communicator.hpp"

#include <atomic>
#include <cstring>

#include "core/error.hpp"
#include "core/poll_wait.hpp"
#include "core/util.hpp"
#include "runtime/flight_recorder.hpp"

namespace st {

namespace {
// nccl-tests' busbw factors (src/all_reduce.cu, reduce_scatter.cu, ...) and
// the ring's latency steps. A send/receive moves its bytes once.
const CollRow kRows[] = {
    {CollKind::AllReduce, "all_reduce", "all_reduce", [](int n) { return 2.0 * (n - 1) / n; },
     [](int n) { return 2.0 * (n - 1); }},
    {CollKind::ReduceScatter, "reduce_scatter", "reduce_scatter",
     [](int n) { return double(n - 1) / n; }, [](int n) { return double(n - 1); }},
    {CollKind::AllGather, "all_gather", "all_gather", [](int n) { return double(n - 1) / n; },
     [](int n) { return double(n - 1); }},
    {CollKind::Broadcast, "broadcast", "broadcast", [](int) { return 1.0; },
     [](int n) { return double(n - 1); }},
    {CollKind::SendRecv, "send_recv", "send/recv", [](int) { return 1.0; },
     [](int) { return 1.0; }},
};
static_assert(sizeof kRows / sizeof kRows[0] == size_t(CollKind::kCount), "one row per kind");

std::atomic<WaitAnswer> g_answer{nullptr};
}  // namespace

const CollRow& coll_row(CollKind k) {
  ST_CHECK(size_t(k) < size_t(CollKind::kCount), "collective kind ", int(k), " has no row");
  return kRows[size_t(k)];
}

const char* coll_name(CollKind k) {
  return size_t(k) < size_t(CollKind::kCount) ? kRows[size_t(k)].name : "?";
}

const char* axis_name(Axis a) {
  static const char* const kNames[] = {"none", "tp", "cp", "dp", "dp_cp", "pp"};
  return size_t(a) < sizeof kNames / sizeof kNames[0] ? kNames[size_t(a)] : "?";
}

CommPart comm_part(Axis a, CollKind k, bool host) {
  if (host) return CommPart::Other;
  switch (a) {
    case Axis::Tp:
      return CommPart::Tp;
    case Axis::Cp:
      return CommPart::Cp;
    case Axis::Pp:
      return CommPart::Pp;
    case Axis::Dp:
    case Axis::DpCp:
    case Axis::None:
      break;
  }
  return k == CollKind::AllGather ? CommPart::Zero : CommPart::Dp;
}

void set_wait_answer(WaitAnswer f) { g_answer.store(f); }

uint64_t Communicator::next_uid() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

Communicator::~Communicator() = default;

std::vector<int64_t> equal_counts(int size, int64_t n) {
  return std::vector<int64_t>(size_t(size), n);
}

// ---- the op's front part ----
CommOp::CommOp(Communicator& comm, const Collective& c)
    : comm_(&comm),
      kind_(c.kind),
      bytes_(c.bytes),
      what_(c.what),
      seq_(c.seq),
      ring_(comm.ring_ != nullptr),
      host_(c.host) {}

void CommOp::started() {
  if (ring_) flight::start(*comm_->ring_, seq_);
}

void CommOp::finish() {
  if (done_.exchange(true, std::memory_order_acq_rel)) return;
  comm_->add_stat(kind_, bytes_, seconds());
  if (ring_) flight::finish(*comm_->ring_, seq_);
}

bool CommHandle::test() {
  if (!op_) return true;
  if (!op_->test()) return false;
  op_->finish();
  return true;
}

void CommHandle::wait() {
  if (op_) op_->comm().wait_host(*op_);
}

void CommHandle::wait(Stream& s) {
  if (op_) op_->wait_stream(s);
}

// ---- the front ----
void Communicator::add_stat(CollKind k, int64_t bytes, double s) {
  std::lock_guard<std::mutex> g(stats_mu_);
  auto& st = stats_[size_t(k)];
  st.seconds += s;
  st.bytes += bytes;
  st.calls += 1;
}

void Communicator::add_wait(CollKind k, bool host, double s) {
  std::lock_guard<std::mutex> g(stats_mu_);
  (host ? stats_[size_t(k)].host_s : stats_[size_t(k)].wait_s) += s;
}

void Communicator::join_flight(const std::vector<int>& world_ranks) {
  ring_ = flight::add_ring(name(), world_ranks);
}

std::shared_ptr<CommOp> Communicator::issue(const Collective& c, Stream*) {
  ST_CHECK(false, "communicator '", name(), "' issues no collectives (", coll_name(c.kind),
           "): an implementation overrides issue()");
  return nullptr;
}

void Communicator::copy_local(void*, const void*, size_t, Stream&) {
  ST_CHECK(false, "communicator '", name(),
           "' has no local copy: an implementation overrides "
           "copy_local()");
}

void Communicator::timed_out(const char* what, int64_t bytes, double waited) {
  ST_CHECK(false, what, " of ", bytes, " bytes on group '", name(), "' (rank ", rank(), " of ",
           size(), ") not finished after ", waited, " s (runtime.timeout_s=", timeout_s_, ")");
}

CommHandle Communicator::start(Collective& c, Stream* after) {
  c.what = coll_row(c.kind).flight;
  c.seq = ring_ ? flight::enqueue(*ring_, c.what, c.bytes) : 0;
  std::shared_ptr<CommOp> op = issue(c, after);
  ST_CHECK(op && op->comm_ == this, "communicator '", name(), "': issue(", coll_name(c.kind),
           ") returned no op of its own");
  return CommHandle(std::move(op));
}

void Communicator::poll_until(const char* what, int64_t bytes, const std::function<bool()>& done) {
  const double t0 = wall_time();
  std::string doing;
  PollPolicy policy;
  pace(policy);
  poll_wait(
      done,
      [&](PollPolicy& p) {
        pace(p);
        if (WaitAnswer f = g_answer.load(std::memory_order_relaxed)) {
          if (doing.empty()) doing = detail::cat(what, " on group '", name(), "'");
          f(doing);
        }
        check_waiting(what);
        const double waited = wall_time() - t0;
        if (waited > timeout_s_) timed_out(what, bytes, waited);
      },
      policy);
}

void Communicator::wait_host(CommOp& op) {
  const double t0 = wall_time();
  if (op.waits_itself()) {
    op.wait_self();
  } else {
    if (op.finished()) return;
    poll_until(op.what(), op.bytes(), [&op] { return op.test(); });
  }
  add_wait(op.kind(), op.host_, wall_time() - t0);
  op.finish();
}

void Communicator::run_host(Collective c) {
  c.host = true;
  c.bytes = c.n * int64_t(dtype_size(c.t));
  ST_CHECK(c.n >= 0, coll_name(c.kind), " on '", name(), "': ", c.n, " elements");
  if ((size() == 1 && c.kind != CollKind::SendRecv) || c.n == 0) return;
  CommHandle h = start(c, nullptr);
  h.wait();
}

namespace {
// A collective with per-rank counts (reduce_scatter, all_gather): counts
// checked against the group, their total, the elements before this rank's
// part, and its bytes by the row (the whole buffer: nccl-tests' size).
Collective per_rank(const Communicator& g, CollKind k, const void* send, void* recv,
                    const std::vector<int64_t>& counts, DType t) {
  const char* what = coll_name(k);
  ST_CHECK(int(counts.size()) == g.size(), what, " on '", g.name(), "': ", counts.size(),
           " counts for ", g.size(), " ranks");
  Collective c;
  c.kind = k;
  c.t = t;
  c.send = send;
  c.recv = recv;
  c.counts = &counts;
  for (int r = 0; r < g.size(); ++r) {
    const int64_t x = counts[size_t(r)];
    ST_CHECK(x >= 0, what, " on '", g.name(), "': a count of ", x, " elements");
    c.total += x;
    if (r < g.rank()) c.mine += x;
  }
  c.bytes = c.total * int64_t(dtype_size(t));
  return c;
}
}  // namespace

void Communicator::all_gather_host(const void* send, void* recv, const std::vector<int64_t>& counts,
                                   DType t) {
  Collective c = per_rank(*this, CollKind::AllGather, send, recv, counts, t);
  char* mine = static_cast<char*>(recv) + size_t(c.mine) * dtype_size(t);
  c.in_place = send == mine;
  if (size() == 1) {
    if (!c.in_place && counts[0]) std::memcpy(mine, send, size_t(c.bytes));
    return;
  }
  if (c.total == 0) return;
  c.host = true;
  start(c, nullptr).wait();
}

std::vector<std::string> all_gather_strings(Communicator& g, const std::string& mine) {
  // The lengths, then the bytes in whole 32-bit words (the seam has no byte
  // dtype), each rank's padded.
  const std::vector<int64_t> ones(size_t(g.size()), 1);
  std::vector<int32_t> lens(size_t(g.size()), 0);
  const int32_t len = int32_t(mine.size());
  g.all_gather_host(&len, lens.data(), ones, DType::I32);
  std::vector<int64_t> words(size_t(g.size()));
  for (size_t r = 0; r < words.size(); ++r) words[r] = (int64_t(lens[r]) + 3) / 4;
  const size_t my_words = size_t(words[size_t(g.rank())]);
  std::vector<int32_t> send(my_words, 0);
  std::memcpy(send.data(), mine.data(), mine.size());
  int64_t total = 0;
  for (int64_t w : words) total += w;
  std::vector<int32_t> all(size_t(std::max<int64_t>(total, 1)), 0);
  g.all_gather_host(send.data(), all.data(), words, DType::I32);
  std::vector<std::string> out;
  int64_t at = 0;
  for (size_t r = 0; r < words.size(); ++r) {
    out.emplace_back(reinterpret_cast<const char*>(all.data() + at), size_t(lens[r]));
    at += words[r];
  }
  return out;
}

CommHandle Communicator::all_reduce(void* buf, int64_t n, DType t, ReduceOp op, Stream& after) {
  ST_CHECK(n >= 0, "all_reduce on '", name(), "': ", n, " elements");
  if (size() == 1 || n == 0) return {};  // in place: nothing to do
  Collective c;
  c.kind = CollKind::AllReduce;
  c.t = t;
  c.op = op;
  c.send = c.recv = buf;
  c.n = n;
  c.bytes = n * int64_t(dtype_size(t));
  return start(c, &after);
}

CommHandle Communicator::reduce_scatter(const void* send, void* recv,
                                        const std::vector<int64_t>& counts, DType t,
                                        Stream& after) {
  Collective c = per_rank(*this, CollKind::ReduceScatter, send, recv, counts, t);
  if (size() == 1) {
    if (counts[0] && send != recv) copy_local(recv, send, size_t(c.bytes), after);
    return {};
  }
  return c.total == 0 ? CommHandle{} : start(c, &after);
}

CommHandle Communicator::all_gather(const void* send, void* recv,
                                    const std::vector<int64_t>& counts, DType t, Stream& after) {
  Collective c = per_rank(*this, CollKind::AllGather, send, recv, counts, t);
  char* mine = static_cast<char*>(recv) + size_t(c.mine) * dtype_size(t);
  c.in_place = send == mine;
  if (size() == 1) {
    if (!c.in_place && counts[0]) copy_local(mine, send, size_t(c.bytes), after);
    return {};
  }
  return c.total == 0 ? CommHandle{} : start(c, &after);
}

CommHandle Communicator::broadcast(void* buf, int64_t n, DType t, int root, Stream& after) {
  ST_CHECK(n >= 0, "broadcast on '", name(), "': ", n, " elements");
  ST_CHECK(root >= 0 && root < size(), "broadcast on '", name(), "': root ", root,
           " outside the group of ", size());
  if (size() == 1 || n == 0) return {};
  Collective c;
  c.kind = CollKind::Broadcast;
  c.t = t;
  c.send = c.recv = buf;
  c.n = n;
  c.root = root;
  c.bytes = n * int64_t(dtype_size(t));
  return start(c, &after);
}

CommHandle Communicator::exchange(const std::vector<P2POp>& ops, DType t, Stream& after) {
  const size_t es = dtype_size(t);
  int64_t n = 0;
  bool receives = false;
  size_t sends = 0;
  for (const P2POp& o : ops) {
    ST_CHECK(o.peer >= 0 && o.peer < size(), "exchange on '", name(), "': peer ", o.peer,
             " outside the group of ", size());
    ST_CHECK(o.n >= 0, "exchange on '", name(), "': ", o.n, " elements");
    n += o.n;
    receives = receives || !o.send;
    sends += o.send;
  }
  if (size() == 1) {  // to and from itself: the k-th receive gets the k-th send
    ST_CHECK(2 * sends == ops.size(), "exchange on '", name(), "' (one rank): ", sends,
             " sends and ", ops.size() - sends, " receives");
    size_t s = 0, r = 0;
    for (size_t k = 0; k < sends; ++k, ++s, ++r) {
      while (!ops[s].send) ++s;
      while (ops[r].send) ++r;
      ST_CHECK(ops[s].n == ops[r].n, "exchange on '", name(), "' (one rank): a send of ", ops[s].n,
               " elements matched with a receive of ", ops[r].n);
      if (ops[s].n && ops[s].buf != ops[r].buf)
        copy_local(ops[r].buf, ops[s].buf, size_t(ops[s].n) * es, after);
    }
    return {};
  }
  if (n == 0) return {};
  Collective c;
  c.kind = CollKind::SendRecv;
  c.t = t;
  c.ops = &ops;
  c.receives = receives;
  c.bytes = n * int64_t(es);
  return start(c, &after);
}

CommHandle Communicator::send(const void* buf, int64_t n, DType t, int peer, Stream& after) {
  return exchange({P2POp{true, const_cast<void*>(buf), n, peer}}, t, after);
}

CommHandle Communicator::recv(void* buf, int64_t n, DType t, int peer, Stream& after) {
  return exchange({P2POp{false, buf, n, peer}}, t, after);
}

void check_same_entries(const std::vector<Communicator*>& groups) {
  for (size_t k = 0; k < groups.size(); ++k) {
    auto* h = dynamic_cast<HostGroup*>(groups[k]);
    if (!h || h->size() < 2) continue;
    // The entry's index and name, exact in a double (FNV-1a of the name, 20 bits).
    uint32_t hash = 2166136261u;
    for (char ch : h->name()) hash = (hash ^ uint8_t(ch)) * 16777619u;
    const double code = double(k) * 1048576.0 + double(hash & 0xFFFFFu);
    double v[2] = {code, -code};
    h->all_reduce_max(v, 2);
    ST_CHECK(v[0] == code && -v[1] == code, "communicators: entry ", k, " of this rank's list ('",
             h->name(), "') is not entry ", k,
             " of every member's list; every rank must hand over its groups in one order "
             "(Backend::make_communicators)");
  }
}

}  // namespace st
