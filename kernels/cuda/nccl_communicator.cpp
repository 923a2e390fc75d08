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
char* offset(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + size_t(elems) * dtype_size(t);
}

// Issues a plan of kernels/cuda/host/nccl_plan.hpp (tested on CPUs against
// the MPI communicator). For an exchange, Send/Recv name ops[step.op].buf.
void issue_plan(const cuda_host::NcclPlan& plan, const void* send, void* recv, DType t,
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

// One collective on the NCCL stream, between its start and end events.
class NcclCommunicator::Op final : public CommOp {
 public:
  Op(NcclCommunicator& c, const Collective& k) : CommOp(c, k) {}
  bool test() override {
    const bool done = end.query();
    if (done) static_cast<NcclCommunicator&>(comm()).reap();
    return done;
  }
  void wait_stream(Stream& s) override { s.wait(end); }
  double seconds() override { return end.query() ? end.seconds_since(start) : 0.0; }
  bool device_started() { return start.query(); }
  bool device_done() { return end.query(); }
  CudaEvent start{true}, end{true};
  double started_at = 0;  // host time first seen running (InFlight)
};

NcclCommunicator::NcclCommunicator(MpiCommunicator& group, CudaDevice& dev, ncclComm_t comm)
    : dev_(dev),
      name_(group.name()),
      rank_(group.rank()),
      size_(group.size()),
      comm_(comm),
      pending_(std::make_unique<cuda_host::InFlight<Op>>()) {
  timeout_s_ = group.timeout_s();
  set_axis(group.axis());
  join_flight(group.world_ranks());
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
  double timeout_s = 600;
  for (MpiCommunicator* g : groups) {
    mine.push_back(g->mpi());
    timeout_s = g->timeout_s();
  }
  // The exchanges go through the front (the collective timeout and the
  // flight recorder apply).
  MpiCommunicator mpi_world(MPI_COMM_WORLD, "nccl split: world", timeout_s);
  const auto plan = cuda_host::plan_nccl_splits(n, cuda_host::gather_groups(mpi_world, mine));
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
    mpi_world.broadcast_bytes(&id, int64_t(sizeof id), 0);
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

std::shared_ptr<CommOp> NcclCommunicator::issue(const Collective& c, Stream* after) {
  ST_CHECK(after, "NCCL communicator '", name_, "': no host collectives");
  // The profiler's range of this collective: op, group and bytes (core/ranges.hpp).
  const ranges::Scope range(ranges::collective_name(c.what, name(), c.bytes));
  check_async(c.what);
  auto op = std::make_shared<Op>(*this, c);
  ready_->record(*after);
  ST_CUDA_CHECK(cudaStreamWaitEvent(stream_->get(), ready_->get(), 0));
  op->start.record(stream_->get());
  cudaStream_t s = stream_->get();
  switch (c.kind) {
    case CollKind::AllReduce:
      ST_NCCL_CHECK(ncclAllReduce(c.recv, c.recv, size_t(c.n), nccl_type(c.t),
                                  c.op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, s),
                    comm_);
      break;
    case CollKind::Broadcast:
      ST_NCCL_CHECK(ncclBroadcast(c.recv, c.recv, size_t(c.n), nccl_type(c.t), c.root, comm_, s),
                    comm_);
      break;
    case CollKind::ReduceScatter:
      issue_plan(cuda_host::plan_reduce_scatter(*c.counts, rank_), c.send, c.recv, c.t, nullptr,
                 comm_, s);
      break;
    case CollKind::AllGather:
      issue_plan(cuda_host::plan_all_gather(*c.counts, rank_, c.in_place), c.send, c.recv, c.t,
                 nullptr, comm_, s);
      break;
    case CollKind::SendRecv: {
      std::vector<cuda_host::P2PArgs> args;
      for (const P2POp& o : *c.ops) args.push_back({o.send, o.n, o.peer});
      issue_plan(cuda_host::plan_exchange(args, size_), nullptr, nullptr, c.t, c.ops, comm_, s);
      break;
    }
    default:
      ST_CHECK(false, "NCCL: no call for collective ", coll_name(c.kind));
  }
  op->end.record(s);
  pending_->push(op);
  return op;
}

void NcclCommunicator::copy_local(void* dst, const void* src, size_t bytes, Stream& after) {
  dev_.copy(dst, src, bytes, after);
}

void NcclCommunicator::reap() { pending_->reap(wall_time()); }

void NcclCommunicator::timed_out(const char* what, int64_t bytes, double waited) {
  fail(detail::cat(what, " of ", bytes, " bytes not finished after ", waited,
                   " s (runtime.timeout_s)"));
}

void NcclCommunicator::check_async(const char* when) {
  if (!comm_) return;
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
    fail(detail::cat("NCCL error (at ", when, "): ", ncclGetErrorString(r), ": ",
                     ncclGetLastError(comm_)));
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
      why = pending_->overdue(wall_time(), timeout_s_);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) fail(why);
    lk.lock();
  }
}

}  // namespace st::cuda
