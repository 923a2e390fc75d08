// Device resources (see device.hpp).
#include "kernels/cuda/device.hpp"

#include <nvtx3/nvToolsExt.h>

#include <cstdlib>

#include "kernels/cuda/cuda_check.hpp"

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

std::string select_device(int local_rank, int local_size, int* ordinal, std::string* name) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) return why;
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible = vis ? std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")" : "";
  // Either every rank sees the node's GPUs (take the local rank's), or the
  // launcher bound one GPU to each rank (srun --gpus-per-task=1 sets
  // CUDA_VISIBLE_DEVICES per task: each rank sees exactly one).
  if (local_size > n && n != 1)
    return std::to_string(local_size) + " ranks on this node but " + std::to_string(n) +
           " visible GPU(s)" + visible + "; launch at most " + std::to_string(n) +
           " rank(s) per node, or bind one GPU per rank (one GPU per rank)";
  const int dev = local_size > n ? 0 : local_rank;
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

HostPin::HostPin(void* p, size_t bytes) {
  if (!p || bytes == 0) return;
  ST_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
  p_ = p;
}
HostPin::~HostPin() {
  if (p_) cudaHostUnregister(p_);
}
HostPin& HostPin::operator=(HostPin&& o) noexcept {
  if (this != &o) {
    if (p_) cudaHostUnregister(p_);
    p_ = o.p_;
    o.p_ = nullptr;
  }
  return *this;
}

Stream::Stream(bool non_blocking, int priority) {
  ST_CUDA_CHECK(cudaStreamCreateWithPriority(
      &s_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::sync() const { ST_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event(bool timing) {
  ST_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { ST_CUDA_CHECK(cudaEventRecord(e_, s)); }
bool Event::done() const {
  const cudaError_t e = cudaEventQuery(e_);
  if (e == cudaErrorNotReady) return false;
  ST_CUDA_CHECK(e);
  return true;
}
void Event::sync() const { ST_CUDA_CHECK(cudaEventSynchronize(e_)); }

DeviceAllocator::DeviceAllocator()
    : cache_(
          [](size_t n) -> void* {
            void* p = nullptr;
            if (cudaMalloc(&p, n) != cudaSuccess) {
              cudaGetLastError();
              return nullptr;
            }
            return p;
          },
          [](void* p) { cudaFree(p); }) {}

DeviceAllocator& DeviceAllocator::instance() {
  static DeviceAllocator a;
  return a;
}

DeviceBuffer::DeviceBuffer(size_t bytes, MemCat cat)
    : p_(DeviceAllocator::instance().allocate(bytes, cat)), bytes_(bytes) {}
DeviceBuffer::~DeviceBuffer() {
  if (p_) DeviceAllocator::instance().free(p_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) DeviceAllocator::instance().free(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}
void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= cap_) return;
  if (p_) ST_CUDA_CHECK(cudaFreeHost(p_));
  p_ = nullptr;
  cap_ = 0;
  ST_CUDA_CHECK(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault));
  cap_ = bytes;
}

CopyStream::CopyStream() : stream_(true, 0), ready_(false) {}
void CopyStream::copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t after) {
  ready_.record(after);
  ST_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
  ST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
}
void CopyStream::sync() { stream_.sync(); }

EventTimer::EventTimer() : a_(true), b_(true) {}
double EventTimer::seconds() const {
  b_.sync();
  float ms = 0.f;
  ST_CUDA_CHECK(cudaEventElapsedTime(&ms, a_.get(), b_.get()));
  return double(ms) * 1e-3;
}

NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
}  // namespace st::cuda
