// NCCL implementation of the Communicator seam (see nccl_communicator.hpp).
#include "kernels/cuda/nccl_communicator.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/ranges.hpp"
#include "core/util.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/host/nccl_memory.hpp"
#include "kernels/cuda/host/nccl_plan.hpp"
#include "kernels/cuda/host/nccl_split.hpp"
#include "kernels/cuda/host/poll_wait.hpp"
#include "runtime/watchdog.hpp"

// NCCL: the message includes NCCL's error string and its last error text.
#define ST_NCCL_CHECK(call, comm)                                                              \
  do {                                                                                         \
    ncclResult_t st_nccl_rc_ = (call);                                                         \
    if (st_nccl_rc_ != ncclSuccess)                                                            \
      ::st::throw_error("NCCL", __FILE__, __LINE__,                                            \
                        ::st::detail::cat(#call, " failed: ", ncclGetErrorString(st_nccl_rc_), \
                                          ": ", ncclGetLastError(comm)));                      \
  } while (0)

namespace st::cuda {
namespace {
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F64:
      return ncclFloat64;
    default:
      return ncclInt32;
  }
}
const char* offset(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + size_t(elems) * dtype_size(t);
}
char* offset(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + size_t(elems) * dtype_size(t);
}

// Issues a plan of kernels/cuda/host/nccl_plan.hpp (tested on CPUs against
// the MPI communicator). For an exchange, Send/Recv name ops[step.op].buf.
void issue(const cuda_host::NcclPlan& plan, const void* send, void* recv, DType t,
           const std::vector<P2POp>* ops, ncclComm_t comm, cudaStream_t s) {
  using cuda_host::Buf;
  using cuda_host::NcclCall;
  auto at = [&](Buf b, int64_t off) -> void* {
    if (b == Buf::None) return nullptr;
    void* base = b == Buf::Send ? const_cast<void*>(send) : recv;
    return offset(base, off, t);
  };
  if (plan.grouped) ST_NCCL_CHECK(ncclGroupStart(), comm);
  for (const auto& st : plan.steps) {
    const size_t n = size_t(st.count);
    switch (st.call) {
      case NcclCall::ReduceScatter:
        ST_NCCL_CHECK(ncclReduceScatter(at(st.src, st.src_off), at(st.dst, st.dst_off), n,
                                        nccl_type(t), ncclSum, comm, s),
                      comm);
        break;
      case NcclCall::AllGather:
        ST_NCCL_CHECK(
            ncclAllGather(at(st.src, st.src_off), at(st.dst, st.dst_off), n, nccl_type(t), comm, s),
            comm);
        break;
      case NcclCall::Reduce:
        ST_NCCL_CHECK(ncclReduce(at(st.src, st.src_off), at(st.dst, st.dst_off), n, nccl_type(t),
                                 ncclSum, st.peer, comm, s),
                      comm);
        break;
      case NcclCall::Broadcast:
        ST_NCCL_CHECK(ncclBroadcast(at(st.src, st.src_off), at(st.dst, st.dst_off), n, nccl_type(t),
                                    st.peer, comm, s),
                      comm);
        break;
      case NcclCall::Send:
        ST_NCCL_CHECK(ncclSend((*ops)[size_t(st.op)].buf, n, nccl_type(t), st.peer, comm, s), comm);
        break;
      case NcclCall::Recv:
        ST_NCCL_CHECK(ncclRecv((*ops)[size_t(st.op)].buf, n, nccl_type(t), st.peer, comm, s), comm);
        break;
      case NcclCall::AllReduce:
      case NcclCall::Copy:
        ST_CHECK(false, "NCCL plan: a step this issuer does not take");
    }
  }
  if (plan.grouped) ST_NCCL_CHECK(ncclGroupEnd(), comm);
}
}  // namespace

struct NcclCommunicator::Coll {
  Coll(CollKind k, int64_t b, const char* w) : kind(k), bytes(b), what(w) {}
  CudaEvent start{true}, end{true};
  CollKind kind;
  int64_t bytes;
  const char* what;
  std::atomic<double> started{0};  // host time it was first seen running (0: not yet)
};

class NcclCommunicator::Op final : public CommOp {
 public:
  Op(NcclCommunicator* c, std::shared_ptr<Coll> coll) : c_(c), coll_(std::move(coll)) {}
  bool test() override {
    const bool done = coll_->end.query();
    if (done) c_->reap();
    return done;
  }
  void wait_host() override { c_->wait_host(*coll_); }
  void wait_stream(Stream& s) override { s.wait(coll_->end); }
  double seconds() override {
    return coll_->end.query() ? coll_->end.seconds_since(coll_->start) : 0.0;
  }

 private:
  NcclCommunicator* c_;
  std::shared_ptr<Coll> coll_;
};

NcclCommunicator::NcclCommunicator(MpiCommunicator& group, CudaDevice& dev, ncclComm_t comm)
    : dev_(dev), name_(group.name()), rank_(group.rank()), size_(group.size()), comm_(comm) {
  timeout_s_ = group.timeout_s();
  dev_.make_current();
  int lo = 0, hi = 0;
  ST_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  // Highest priority: collectives should not queue behind compute kernels.
  stream_ = std::make_unique<CudaStream>("nccl:" + name_, hi);
  ready_ = std::make_unique<CudaEvent>(false);
  if (size_ == 1) return;  // no NCCL communicator for a group of one
  ST_CHECK(comm_ != nullptr, "NCCL communicator '", name_, "' of ", size_,
           " ranks was not made (split_communicators)");
  watchdog_ = std::thread([this] { watch(); });
}

std::vector<std::unique_ptr<NcclCommunicator>> split_communicators(
    const std::vector<MpiCommunicator*>& groups, CudaDevice& dev, ncclComm_t& world) {
  int n = 1, me = 0;
  ST_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  ST_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  std::vector<MPI_Comm> mine;
  for (MpiCommunicator* g : groups) mine.push_back(g->mpi());
  const auto plan = cuda_host::plan_nccl_splits(n, cuda_host::gather_groups(MPI_COMM_WORLD, mine));
  const auto at = cuda_host::calls_for(plan, cuda_host::role_groups(MPI_COMM_WORLD, mine));
  dev.make_current();
  // NCCL's device memory: what vanishes while the communicators are made,
  // eagerly connected (host/nccl_memory.hpp; docs/cuda.md says what it misses).
  static const cuda_host::ConnectMode mode = [] {
    auto m = cuda_host::connect_mode(std::getenv("NCCL_RUNTIME_CONNECT"));
    if (m.set_env) setenv("NCCL_RUNTIME_CONNECT", "0", 0);  // before NCCL's first call
    return m;
  }();
  ST_CUDA_CHECK(cudaDeviceSynchronize());
  size_t free_before = 0, free_after = 0, total = 0;
  ST_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  const int64_t cache_before = dev.cache_reserved();
  if (!world && n > 1) {
    ncclUniqueId id{};
    if (me == 0) ST_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    ST_MPI_CHECK(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD));
    ST_NCCL_CHECK(ncclCommInitRank(&world, n, id, me), nullptr);
  }
  // Every rank makes every call, in the plan's order (a rank outside all of
  // a call's groups passes NCCL_SPLIT_NOCOLOR and gets no communicator).
  std::vector<ncclComm_t> made(plan.calls.size(), nullptr);
  for (size_t c = 0; c < plan.calls.size(); ++c) {
    const int color = plan.calls[c].color[size_t(me)];
    ST_NCCL_CHECK(ncclCommSplit(world, color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                                plan.calls[c].key[size_t(me)], &made[c], nullptr),
                  world);
  }
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (size_t k = 0; k < groups.size(); ++k)
    out.push_back(std::make_unique<NcclCommunicator>(*groups[k], dev,
                                                     at[k] < 0 ? nullptr : made[size_t(at[k])]));
  ST_CUDA_CHECK(cudaDeviceSynchronize());
  ST_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  const int64_t bytes =
      cuda_host::nccl_creation_bytes(free_before, free_after, cache_before, dev.cache_reserved());
  dev.add_outside_cache(MemCat::Comm, bytes);
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", double(bytes) / 1048576.0);
  log0("NCCL: ", out.size(), " communicators from ", plan.calls.size(), " splits; ", mib,
       " MiB of device memory on rank 0 after creation (telemetry: category comm); ", mode.note);
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (stream_) cudaStreamSynchronize(stream_->get());
  try {
    reap();
  } catch (...) {  // destructors do not throw; the job is ending anyway
  }
  if (comm_ && !aborted_) ncclCommDestroy(comm_);
}

CommHandle NcclCommunicator::launch(Stream& after, CollKind k, int64_t bytes, const char* what,
                                    const std::function<void()>& enqueue) {
  // The profiler's range of this collective: op, group and bytes (core/ranges.hpp).
  const ranges::Scope range(ranges::collective_name(what, name(), bytes));
  check_async(what);
  auto c = std::make_shared<Coll>(k, bytes, what);
  ready_->record(after);
  ST_CUDA_CHECK(cudaStreamWaitEvent(stream_->get(), ready_->get(), 0));
  c->start.record(stream_->get());
  enqueue();
  c->end.record(stream_->get());
  {
    std::lock_guard<std::mutex> g(mu_);
    pending_.push_back(c);
  }
  return CommHandle(std::make_shared<Op>(this, std::move(c)));
}

void NcclCommunicator::reap() {
  std::vector<std::shared_ptr<Coll>> done;
  {
    std::lock_guard<std::mutex> g(mu_);
    while (!pending_.empty() && pending_.front()->end.query()) {
      done.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }
  for (auto& c : done) add_stat(c->kind, c->bytes, c->end.seconds_since(c->start));
}

void NcclCommunicator::wait_host(Coll& c) {
  // Polled (host/poll_wait.hpp); every 50 ms the watchdog is answered, NCCL's
  // asynchronous error checked and the timeout applied.
  const std::string doing = detail::cat(c.what, " on NCCL group '", name_, "'");
  cuda_host::poll_wait([&] { return c.end.query(); },
                       [&] {
                         watchdog::poll(doing);
                         check_async(c.what);
                         if (c.started == 0 && c.start.query()) c.started = wall_time();
                         if (c.started > 0 && wall_time() - c.started > timeout_s_)
                           fail(detail::cat(c.what, " of ", c.bytes, " bytes not finished after ",
                                            timeout_s_, " s (runtime.timeout_s)"));
                       });
  reap();
}

void NcclCommunicator::check_async(const char* when) {
  if (!comm_) return;
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
    fail(detail::cat("NCCL error (at ", when, "): ", ncclGetErrorString(r), ": ",
                     ncclGetLastError(comm_)));
}

std::string NcclCommunicator::overdue() {
  std::lock_guard<std::mutex> g(mu_);
  if (pending_.empty()) return "";
  Coll& c = *pending_.front();
  if (c.end.query()) return "";
  const double now = wall_time();
  if (c.started == 0 && c.start.query()) c.started = now;
  if (c.started > 0 && now - c.started > timeout_s_)
    return detail::cat(c.what, " of ", c.bytes, " bytes not finished ", now - c.started,
                       " s after it started on the device (runtime.timeout_s=", timeout_s_, ")");
  return "";
}

void NcclCommunicator::fail(const std::string& why) {
  const std::string msg =
      detail::cat(error_prefix(__FILE__, __LINE__), "NCCL group '", name_, "' (rank ", rank_,
                  " of ", size_, "): ", why, "; a peer is dead or stuck. Aborting the job.");
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  if (!aborted_.exchange(true) && comm_) ncclCommAbort(comm_);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

void NcclCommunicator::watch() {
  dev_.make_current();
  const auto period = std::chrono::milliseconds(std::max(10, std::min(100, int(timeout_s_ * 100))));
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, period);
    if (stop_) break;
    lk.unlock();
    std::string why;
    try {
      check_async("watchdog");
      reap();
      why = overdue();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) fail(why);
    lk.lock();
  }
}

CommHandle NcclCommunicator::all_reduce(void* buf, int64_t n, DType t, ReduceOp op, Stream& after) {
  if (size_ == 1 || n == 0) return {};
  return launch(after, CollKind::AllReduce, n * int64_t(dtype_size(t)), "all_reduce", [&] {
    ST_NCCL_CHECK(ncclAllReduce(buf, buf, size_t(n), nccl_type(t),
                                op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, stream_->get()),
                  comm_);
  });
}

CommHandle NcclCommunicator::reduce_scatter(const void* send, void* recv,
                                            const std::vector<int64_t>& counts, DType t,
                                            Stream& after) {
  ST_CHECK(int(counts.size()) == size_, "reduce_scatter on '", name_, "': ", counts.size(),
           " counts for ", size_, " ranks");
  if (size_ == 1) {
    if (counts[0] && send != recv) dev_.copy(recv, send, size_t(counts[0]) * dtype_size(t), after);
    return {};
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total == 0) return {};
  const auto plan = cuda_host::plan_reduce_scatter(counts, rank_);
  return launch(after, CollKind::ReduceScatter, total * int64_t(dtype_size(t)), "reduce_scatter",
                [&] { issue(plan, send, recv, t, nullptr, comm_, stream_->get()); });
}

CommHandle NcclCommunicator::all_gather(const void* send, void* recv,
                                        const std::vector<int64_t>& counts, DType t,
                                        Stream& after) {
  ST_CHECK(int(counts.size()) == size_, "all_gather on '", name_, "': ", counts.size(),
           " counts for ", size_, " ranks");
  std::vector<int64_t> displ;
  int64_t total = 0;
  for (int64_t c : counts) displ.push_back(total), total += c;
  char* mine = offset(recv, displ[size_t(rank_)], t);
  if (size_ == 1) {
    if (send != mine && counts[0]) dev_.copy(mine, send, size_t(counts[0]) * dtype_size(t), after);
    return {};
  }
  if (total == 0) return {};
  const auto plan = cuda_host::plan_all_gather(counts, rank_, send == mine);
  return launch(after, CollKind::AllGather, total * int64_t(dtype_size(t)), "all_gather",
                [&] { issue(plan, send, recv, t, nullptr, comm_, stream_->get()); });
}

CommHandle NcclCommunicator::exchange(const std::vector<P2POp>& ops, DType t, Stream& after) {
  int64_t bytes = 0;
  std::vector<const P2POp*> sends, recvs;
  for (const P2POp& o : ops) {
    ST_CHECK(o.peer >= 0 && o.peer < size_, "exchange on '", name_, "': peer ", o.peer,
             " outside the group of ", size_);
    ST_CHECK(o.n >= 0, "exchange on '", name_, "': ", o.n, " elements");
    bytes += o.n * int64_t(dtype_size(t));
    (o.send ? sends : recvs).push_back(&o);
  }
  if (size_ == 1) {  // to and from itself: the k-th receive gets the k-th send
    ST_CHECK(sends.size() == recvs.size(), "exchange on '", name_, "' (one rank): ", sends.size(),
             " sends and ", recvs.size(), " receives");
    for (size_t i = 0; i < sends.size(); ++i) {
      ST_CHECK(sends[i]->n == recvs[i]->n, "exchange on '", name_, "' (one rank): a send of ",
               sends[i]->n, " elements matched with a receive of ", recvs[i]->n);
      if (sends[i]->buf != recvs[i]->buf)
        dev_.copy(recvs[i]->buf, sends[i]->buf, size_t(sends[i]->n) * dtype_size(t), after);
    }
    return {};
  }
  if (bytes == 0) return {};
  std::vector<cuda_host::P2PArgs> args;
  for (const P2POp& o : ops) args.push_back({o.send, o.n, o.peer});
  const auto plan = cuda_host::plan_exchange(args, size_);
  return launch(after, CollKind::SendRecv, bytes, "send/recv",
                [&] { issue(plan, nullptr, nullptr, t, &ops, comm_, stream_->get()); });
}
}  // namespace st::cuda
