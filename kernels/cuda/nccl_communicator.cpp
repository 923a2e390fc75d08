// NCCL implementation of DeviceCommunicator (see nccl_communicator.hpp):
// unique id over MPI, ncclCommSplit for groups, a dedicated stream ordered
// after the compute stream with events, and a watchdog thread that turns a
// dead peer or an NCCL error into an abort that names the rank.
#include "comm/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/util.hpp"

#define ST_NCCL_CHECK(call, comm)                                                              \
  do {                                                                                         \
    ncclResult_t st_nccl_rc_ = (call);                                                         \
    if (st_nccl_rc_ != ncclSuccess)                                                            \
      ::st::throw_error("NCCL", __FILE__, __LINE__,                                            \
                        ::st::detail::cat(#call, " failed: ", ncclGetErrorString(st_nccl_rc_), \
                                          ": ", ncclGetLastError(comm)));                      \
  } while (0)

#define ST_CUDA_RT_CHECK(call)                                                                   \
  do {                                                                                           \
    cudaError_t st_cuda_rc_ = (call);                                                            \
    if (st_cuda_rc_ != cudaSuccess)                                                              \
      ::st::throw_error("CUDA", __FILE__, __LINE__,                                              \
                        ::st::detail::cat(#call, " failed: ", cudaGetErrorString(st_cuda_rc_))); \
  } while (0)

namespace st {
namespace {

ncclDataType_t nccl_type(CommDType t) { return t == CommDType::BF16 ? ncclBfloat16 : ncclFloat32; }
int64_t type_bytes(CommDType t) { return t == CommDType::BF16 ? 2 : 4; }

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, std::string name, double timeout_s)
      : comm_(comm), name_(std::move(name)) {
    timeout_s_ = timeout_s;
    ST_NCCL_CHECK(ncclCommCount(comm_, &size_), comm_);
    ST_NCCL_CHECK(ncclCommUserRank(comm_, &rank_), comm_);
    ST_CUDA_RT_CHECK(cudaGetDevice(&device_));
    int lo = 0, hi = 0;
    ST_CUDA_RT_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    // Highest priority: collectives should not queue behind compute kernels.
    ST_CUDA_RT_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, hi));
    ST_CUDA_RT_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    ST_CUDA_RT_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    ST_CUDA_RT_CHECK(cudaMalloc(&scratch_, 16));
    on_abort_ = [](const std::string&) { MPI_Abort(MPI_COMM_WORLD, 1); };
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (!aborted_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    for (auto& p : pending_) {
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.end);
    }
    cudaFree(scratch_);
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  void set_compute_stream(StreamHandle s) override { compute_ = static_cast<cudaStream_t>(s); }
  StreamHandle stream() const override { return stream_; }
  void set_abort_handler(std::function<void(const std::string&)> f) override {
    std::lock_guard<std::mutex> g(mu_);
    on_abort_ = std::move(f);
  }

  void wait_on(StreamHandle s) override {
    ST_CUDA_RT_CHECK(cudaEventRecord(done_, stream_));
    ST_CUDA_RT_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), done_, 0));
    reap(false);
  }

  void synchronize() override {
    const double t0 = wall_time();
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) ST_CUDA_RT_CHECK(e);
      check_async("waiting for collectives");
      if (wall_time() - t0 > timeout_s_)
        fail(detail::cat("collectives not finished after ", timeout_s_, " s"));
      std::this_thread::yield();
    }
    reap(true);
  }

  // ---- typed, non-blocking ----
  void all_reduce_sum_typed(void* buf, int64_t n, CommDType dt) override {
    auto t = begin(CollKind::AllReduce, n * type_bytes(dt));
    ST_NCCL_CHECK(ncclAllReduce(buf, buf, size_t(n), nccl_type(dt), ncclSum, comm_, stream_),
                  comm_);
    end(t);
  }
  void all_reduce_max_typed(void* buf, int64_t n, CommDType dt) override {
    auto t = begin(CollKind::AllReduce, n * type_bytes(dt));
    ST_NCCL_CHECK(ncclAllReduce(buf, buf, size_t(n), nccl_type(dt), ncclMax, comm_, stream_),
                  comm_);
    end(t);
  }
  void reduce_scatter_sum_typed(const void* send, void* recv, int64_t n, CommDType dt) override {
    auto t = begin(CollKind::ReduceScatter, n * size_ * type_bytes(dt));
    ST_NCCL_CHECK(ncclReduceScatter(send, recv, size_t(n), nccl_type(dt), ncclSum, comm_, stream_),
                  comm_);
    end(t);
  }
  void all_gather_typed(const void* send, void* recv, int64_t n, CommDType dt) override {
    auto t = begin(CollKind::AllGather, n * size_ * type_bytes(dt));
    ST_NCCL_CHECK(ncclAllGather(send, recv, size_t(n), nccl_type(dt), comm_, stream_), comm_);
    end(t);
  }

  // ---- Communicator ----
  void all_reduce_sum(float* buf, int64_t n) override {
    all_reduce_sum_typed(buf, n, CommDType::F32);
    synchronize();
  }
  CommHandle all_reduce_sum_async(float* buf, int64_t n) override {
    all_reduce_sum_typed(buf, n, CommDType::F32);
    return CommHandle{};
  }
  void all_reduce_sum(double* buf, int64_t n) override {
    auto t = begin(CollKind::AllReduce, n * 8);
    ST_NCCL_CHECK(ncclAllReduce(buf, buf, size_t(n), ncclFloat64, ncclSum, comm_, stream_), comm_);
    end(t);
    synchronize();
  }
  void all_reduce_max(double* buf, int64_t n) override {
    auto t = begin(CollKind::AllReduce, n * 8);
    ST_NCCL_CHECK(ncclAllReduce(buf, buf, size_t(n), ncclFloat64, ncclMax, comm_, stream_), comm_);
    end(t);
    synchronize();
  }
  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    reduce_scatter_sum_typed(send, recv, n, CommDType::F32);
    synchronize();
  }
  CommHandle reduce_scatter_sum_async(const float* send, float* recv, int64_t n) override {
    reduce_scatter_sum_typed(send, recv, n, CommDType::F32);
    return CommHandle{};
  }
  void all_gather(const float* send, float* recv, int64_t n) override {
    all_gather_typed(send, recv, n, CommDType::F32);
    synchronize();
  }
  void broadcast(float* buf, int64_t n, int root) override { broadcast_bytes(buf, n * 4, root); }
  void broadcast_bytes(void* buf, int64_t n, int root) override {
    auto t = begin(CollKind::Broadcast, n);
    ST_NCCL_CHECK(ncclBroadcast(buf, buf, size_t(n), ncclInt8, root, comm_, stream_), comm_);
    end(t);
    synchronize();
  }
  void send(const float* buf, int64_t n, int peer, int) override {
    auto t = begin(CollKind::SendRecv, n * 4);
    ST_NCCL_CHECK(ncclSend(buf, size_t(n), ncclFloat32, peer, comm_, stream_), comm_);
    end(t);
    synchronize();
  }
  void recv(float* buf, int64_t n, int peer, int) override {
    auto t = begin(CollKind::SendRecv, n * 4);
    ST_NCCL_CHECK(ncclRecv(buf, size_t(n), ncclFloat32, peer, comm_, stream_), comm_);
    end(t);
    synchronize();
  }
  void barrier() override {
    auto t = begin(CollKind::AllReduce, 4);
    ST_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), comm_);
    end(t);
    synchronize();
  }

  std::unique_ptr<DeviceCommunicator> split(int color, int key, const std::string& name) override {
    synchronize();
    ncclComm_t sub = nullptr;
    ST_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr), comm_);
    ST_CHECK(sub != nullptr, "ncclCommSplit gave no communicator for group '", name, "' (color ",
             color, ")");
    return std::make_unique<NcclCommunicator>(sub, name, timeout_s_);
  }

 private:
  struct Pending {
    cudaEvent_t start = nullptr, end = nullptr;
    CollKind kind = CollKind::AllReduce;
    int64_t bytes = 0;
    double t0 = 0;  // host time of the enqueue
  };

  Pending begin(CollKind k, int64_t bytes) {
    check_async("before a collective");
    Pending p;
    p.kind = k;
    p.bytes = bytes;
    p.t0 = wall_time();
    ST_CUDA_RT_CHECK(cudaEventRecord(ready_, compute_));
    ST_CUDA_RT_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    ST_CUDA_RT_CHECK(cudaEventCreate(&p.start));
    ST_CUDA_RT_CHECK(cudaEventCreate(&p.end));
    ST_CUDA_RT_CHECK(cudaEventRecord(p.start, stream_));
    return p;
  }
  void end(Pending& p) {
    ST_CUDA_RT_CHECK(cudaEventRecord(p.end, stream_));
    std::lock_guard<std::mutex> g(mu_);
    pending_.push_back(p);
  }

  // Count finished collectives into the stats (device time between events).
  void reap(bool all_done) {
    std::lock_guard<std::mutex> g(mu_);
    while (!pending_.empty()) {
      Pending& p = pending_.front();
      if (!all_done && cudaEventQuery(p.end) != cudaSuccess) break;
      float ms = 0.f;
      cudaEventElapsedTime(&ms, p.start, p.end);
      add_stat(p.kind, p.bytes, double(ms) * 1e-3);
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.end);
      pending_.pop_front();
    }
  }

  void check_async(const char* when) {
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
      fail(detail::cat("NCCL error ", when, ": ", ncclGetErrorString(r), ": ",
                       ncclGetLastError(comm_)));
  }

  [[noreturn]] void fail(const std::string& why) {
    const std::string msg = detail::cat(error_prefix(__FILE__, __LINE__), "NCCL group '", name_,
                                        "' (rank ", rank_, " of ", size_, "): ", why,
                                        "; a peer is dead or stuck. Aborting the communicator.");
    std::fprintf(stderr, "%s\n", msg.c_str());
    std::fflush(stderr);
    std::function<void(const std::string&)> h;
    {
      std::lock_guard<std::mutex> g(mu_);
      h = on_abort_;
    }
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
    if (h) h(msg);
    throw Error(msg);
  }

  void watch() {
    cudaSetDevice(device_);
    const auto period = std::chrono::milliseconds(timeout_s_ < 1.0 ? 10 : 100);
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, period);
      if (stop_ || aborted_) break;
      std::string why;
      ncclResult_t r = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &r) == ncclSuccess && r != ncclSuccess &&
          r != ncclInProgress) {
        why = detail::cat("NCCL asynchronous error: ", ncclGetErrorString(r));
      } else if (!pending_.empty()) {
        const Pending& p = pending_.front();
        if (cudaEventQuery(p.end) == cudaErrorNotReady && wall_time() - p.t0 > timeout_s_)
          why = detail::cat(coll_name(p.kind), " of ", p.bytes, " bytes not finished after ",
                            timeout_s_, " s (runtime.timeout_s)");
      }
      if (!why.empty()) {
        lk.unlock();
        try {
          fail(why);
        } catch (const Error&) {
          // the message is printed; the handler decided what happens to the job
        }
        return;
      }
    }
  }

  ncclComm_t comm_;
  std::string name_;
  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t stream_ = nullptr, compute_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  void* scratch_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::function<void(const std::string&)> on_abort_;
  std::thread watchdog_;
  bool stop_ = false;
  std::atomic<bool> aborted_{false};
};
}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(MpiCommunicator& bootstrap,
                                                           const std::string& name,
                                                           double timeout_s) {
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) ST_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
  ST_MPI_CHECK(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, bootstrap.mpi()));
  ncclComm_t comm = nullptr;
  ST_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), nullptr);
  return std::make_unique<NcclCommunicator>(comm, name, timeout_s);
}
}  // namespace st
