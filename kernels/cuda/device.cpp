// The CUDA device, its streams and events, and device selection (see
// device.hpp).
#include "kernels/cuda/device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "core/poll_wait.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/host/device_select.hpp"
#include "kernels/cuda/host/staging_ring.hpp"
#include "runtime/watchdog.hpp"

namespace st::cuda {

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why)
      *why = e != cudaSuccess ? std::string("no CUDA device visible: ") + cudaGetErrorString(e)
                              : std::string("no CUDA device visible");
    cudaGetLastError();  // clear the sticky error for later calls
    return 0;
  }
  return n;
}

std::string select_device(Communicator* node, int* ordinal, std::string* name) {
  std::string why;
  const int n = device_count(&why);
  // Every rank takes part in the exchange, GPUs or not, so none waits alone.
  std::vector<std::string> mine;
  for (int i = 0; i < n; ++i) {
    char bus[32] = {0};
    const cudaError_t e = cudaDeviceGetPCIBusId(bus, int(sizeof bus), i);
    if (e != cudaSuccess) {
      cudaGetLastError();
      std::snprintf(bus, sizeof bus, "ordinal-%d-no-bus-id", i);
    }
    mine.emplace_back(bus);
  }
  const auto plan = cuda_host::plan_devices(cuda_host::gather_visible(node, mine));
  const int me = node ? node->rank() : 0;
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible = vis ? std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")" : "";
  if (n == 0) return why;
  if (!plan.ok()) return plan.error + visible;
  const int dev = plan.ordinal[size_t(me)];
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return "cudaSetDevice(" + std::to_string(dev) + ") failed: " + cudaGetErrorString(e) + visible;
  }
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return "cudaGetDeviceProperties(" + std::to_string(dev) + ") failed: " + cudaGetErrorString(e);
  }
  if (prop.major < 8)
    return std::string("GPU ") + std::to_string(dev) + " (" + prop.name + ") is sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor) +
           "; the CUDA backend needs bf16 tensor cores (sm_80 or newer)";
  *ordinal = dev;
  *name = prop.name;
  return "";
}

cudaStream_t native(Stream& s) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  ST_CHECK(cs != nullptr, "stream '", s.name(), "' is not a stream of the CUDA device");
  return cs->get();
}

// ---- events ----
CudaEvent::CudaEvent(bool timing) : timing_(timing) {
  ST_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
CudaEvent::~CudaEvent() {
  if (e_) cudaEventDestroy(e_);
}
void CudaEvent::record(cudaStream_t s) {
  ST_CUDA_CHECK(cudaEventRecord(e_, s));
  recorded_ = true;
}
bool CudaEvent::query() { return !recorded_ || ST_CUDA_QUERY(cudaEventQuery(e_)); }
void CudaEvent::synchronize() {
  if (recorded_)
    poll_wait([this] { return ST_CUDA_QUERY(cudaEventQuery(e_)); },
              [] { watchdog::poll("synchronize of a CUDA event"); });
}
double CudaEvent::seconds_since(Event& start) {
  auto* a = dynamic_cast<CudaEvent*>(&start);
  ST_CHECK(a != nullptr, "seconds_since: the start event is not a CUDA event");
  ST_CHECK(timing_ && a->timing_, "seconds_since: events created without timing");
  if (!recorded_ || !a->recorded_) return 0;
  a->synchronize();
  synchronize();
  float ms = 0.f;
  ST_CUDA_CHECK(cudaEventElapsedTime(&ms, a->e_, e_));
  return double(ms) * 1e-3;
}

// ---- streams ----
namespace {
struct HostWork {
  std::function<void()> fn;
  CudaStream* stream;
};
void CUDART_CB run_host_work(void* p) {
  std::unique_ptr<HostWork> w(static_cast<HostWork*>(p));
  try {
    w->fn();
  } catch (...) {
    w->stream->host_error(std::current_exception());
  }
}
}  // namespace

CudaStream::CudaStream(std::string name, int priority) : name_(std::move(name)) {
  ST_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority));
}
CudaStream::~CudaStream() {
  if (!s_) return;
  cudaStreamSynchronize(s_);  // host work still queued refers to this object
  cudaStreamDestroy(s_);
}
void CudaStream::wait(Event& e) {
  auto* ce = dynamic_cast<CudaEvent*>(&e);
  ST_CHECK(ce != nullptr, "stream '", name_, "' cannot wait for an event of another device");
  if (ce->recorded()) ST_CUDA_CHECK(cudaStreamWaitEvent(s_, ce->get(), 0));
}
void CudaStream::synchronize() {
  // Polled, answering the watchdog meanwhile (core/poll_wait.hpp).
  poll_wait([this] { return ST_CUDA_QUERY(cudaStreamQuery(s_)); },
            [this] { watchdog::poll("synchronize of CUDA stream '" + name_ + "'"); });
  rethrow();
  for (auto& f : after_sync_) f();
}
void CudaStream::enqueue(std::function<void()> fn) {
  rethrow();
  auto* w = new HostWork{std::move(fn), this};
  const cudaError_t e = cudaLaunchHostFunc(s_, &run_host_work, w);
  if (e != cudaSuccess) {
    delete w;
    ST_CUDA_CHECK(e);
  }
}
void CudaStream::host_error(std::exception_ptr e) {
  std::lock_guard<std::mutex> g(mu_);
  if (!error_) error_ = std::move(e);
}
void CudaStream::rethrow() {
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> g(mu_);
    std::swap(e, error_);
  }
  if (e) std::rethrow_exception(e);
}

// ---- the pinned staging ring of copy_from_host ----
class CudaDevice::Staging {
 public:
  static constexpr size_t kBytes = size_t(32) << 20;  // the ring
  static constexpr size_t kChunk = size_t(8) << 20;   // largest single DMA from it
  Staging() { ST_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&base_), kBytes, 0)); }
  ~Staging() {
    for (auto& u : ring_.in_use()) {
      cudaEventSynchronize(u.token);
      cudaEventDestroy(u.token);
    }
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
    if (base_) cudaFreeHost(base_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // The slot bookkeeping is cuda_host::StagingRing (tested on CPUs); here
  // the tokens are events recorded behind each DMA.
  void upload(void* dst, const void* host, size_t bytes, cudaStream_t s) {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [off, n] : cuda_host::split_chunks(bytes, kChunk)) {
      const size_t at = ring_.take(
          n, [](cudaEvent_t e) { return ST_CUDA_QUERY(cudaEventQuery(e)); },
          [](cudaEvent_t e) { ST_CUDA_CHECK(cudaEventSynchronize(e)); },
          [this](cudaEvent_t e) { spare_.push_back(e); });
      std::memcpy(base_ + at, static_cast<const char*>(host) + off, n);
      ST_CUDA_CHECK(
          cudaMemcpyAsync(static_cast<char*>(dst) + off, base_ + at, n, cudaMemcpyHostToDevice, s));
      cudaEvent_t e = event();
      ST_CUDA_CHECK(cudaEventRecord(e, s));
      ring_.hold(at, n, e);
    }
  }

 private:
  cudaEvent_t event() {
    if (!spare_.empty()) {
      cudaEvent_t e = spare_.back();
      spare_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    ST_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  std::mutex mu_;
  char* base_ = nullptr;
  cuda_host::StagingRing<cudaEvent_t> ring_{kBytes};
  std::vector<cudaEvent_t> spare_;
};

// ---- the device ----
namespace {
void* raw_alloc(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) {
    cudaGetLastError();  // out of memory is not sticky; clear it for the retry
    return nullptr;
  }
  return p;
}
}  // namespace

CudaDevice::CudaDevice(int ordinal, std::string name)
    : ordinal_(ordinal),
      name_(std::move(name)),
      cache_(
          raw_alloc, [](void* p) { cudaFree(p); }, /*feed_memstats=*/false) {
  ST_CUDA_CHECK(cudaSetDevice(ordinal_));
  compute_ = std::make_unique<CudaStream>("compute");
  staging_ = std::make_unique<Staging>();
}

CudaDevice::~CudaDevice() {
  if (compute_) cudaStreamSynchronize(compute_->get());
  staging_.reset();
  compute_.reset();
}

void CudaDevice::make_current() const {
  thread_local int current = -1;
  if (current == ordinal_) return;
  ST_CUDA_CHECK(cudaSetDevice(ordinal_));
  current = ordinal_;
}

void* CudaDevice::allocate(size_t bytes, MemCat cat) {
  make_current();
  return cache_.allocate(bytes, cat);
}

void CudaDevice::deallocate(void* p, size_t, MemCat) {
  if (p) cache_.free(p);
}

int64_t CudaDevice::capacity_bytes() const {
  make_current();
  size_t free = 0, total = 0;
  ST_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return int64_t(total);
}

MemoryStats CudaDevice::memory() const {
  const BlockCache::Stats s = cache_.stats();
  MemoryStats m;
  m.current = s.cat_current;
  m.peak = s.cat_peak;
  m.current_total = s.in_use;
  m.peak_total = s.in_use_peak;
  for (size_t c = 0; c < kMemCats; ++c) {  // constant since start-up: in every peak too
    m.current[c] += outside_[c];
    m.peak[c] += outside_[c];
    m.current_total += outside_[c];
    m.peak_total += outside_[c];
  }
  return m;
}

void CudaDevice::reset_peaks() { cache_.reset_peaks(); }

std::unique_ptr<Stream> CudaDevice::create_stream(const std::string& name) {
  make_current();
  return std::make_unique<CudaStream>(name);
}

std::unique_ptr<Event> CudaDevice::create_event() {
  make_current();
  return std::make_unique<CudaEvent>(true);
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes, Stream& s) {
  if (bytes == 0 || dst == src) return;
  ST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(s)));
}

void CudaDevice::copy_to_host(void* host, const void* src, size_t bytes, Stream& s) {
  if (bytes == 0) return;
  ST_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, native(s)));
}

void CudaDevice::copy_from_host(void* dst, const void* host, size_t bytes, Stream& s) {
  if (bytes == 0) return;
  make_current();
  staging_->upload(dst, host, bytes, native(s));
}

void CudaDevice::fill_zero(void* p, size_t bytes, Stream& s) {
  if (bytes == 0) return;
  ST_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, native(s)));
}

void* CudaDevice::allocate_pinned(size_t bytes) {
  make_current();
  void* p = nullptr;
  ST_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault));
  return p;
}

void CudaDevice::free_pinned(void* p) {
  if (!p) return;
  make_current();
  ST_CUDA_CHECK(cudaFreeHost(p));
}
}  // namespace st::cuda
