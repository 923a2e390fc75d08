// Device resources of the CUDA backend, each RAII: streams and events, the
// caching device allocator (st::BlockCache over cudaMalloc, byte accounting
// per st::MemCat), pinned host buffers and a copy stream for checkpoint
// snapshots, CUDA-event phase timers for telemetry, and NVTX ranges that
// name phases in Nsight Systems.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/cuda_block_cache.hpp"

namespace st::cuda {

// Visible devices (0 when there is no GPU or no driver; never throws) and,
// when 0, why.
int device_count(std::string* why = nullptr);

// One GPU per rank: the node-local rank's ordinal among the visible devices
// (CUDA_VISIBLE_DEVICES narrows and renumbers them, the CUDA runtime's own
// rule), or device 0 when each rank sees exactly one (a launcher binding a
// GPU per task). Sets it current. Returns "" and fills *ordinal and *name,
// or the reason it cannot (no device; more ranks on the node than visible
// GPUs; a GPU older than sm_80).
std::string select_device(int local_rank, int local_size, int* ordinal, std::string* name);

class Stream {
 public:
  explicit Stream(bool non_blocking = true, int priority = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s);
  bool done() const;  // cudaEventQuery
  void sync() const;

 private:
  cudaEvent_t e_ = nullptr;
};

// Process-wide caching allocator for the current device.
class DeviceAllocator {
 public:
  static DeviceAllocator& instance();
  void* allocate(size_t bytes, MemCat cat) { return cache_.allocate(bytes, cat); }
  void free(void* p) { cache_.free(p); }
  void empty_cache() { cache_.empty_cache(); }
  BlockCache::Stats stats() const { return cache_.stats(); }
  void reset_peaks() { cache_.reset_peaks(); }

 private:
  DeviceAllocator();
  BlockCache cache_;
};

// An owning device buffer from DeviceAllocator. Freed blocks are reused in
// stream order: free a buffer only after the work using it was enqueued on
// the stream that will reuse it (the single-compute-stream case), or after
// synchronising.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, MemCat cat);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  void* data() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, reused across snapshots; grows, never shrinks.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void reserve(size_t bytes);
  void* data() const { return p_; }
  size_t capacity() const { return cap_; }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

// Page-locks existing host memory in place (cudaHostRegister) for as long
// as the object lives, so device <-> host copies into it are DMA and
// asynchronous: the checkpoint snapshot's host views stay where the
// checkpoint code reads them, without a second copy.
class HostPin {
 public:
  HostPin() = default;
  HostPin(void* p, size_t bytes);
  ~HostPin();
  HostPin(HostPin&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  HostPin& operator=(HostPin&& o) noexcept;
  HostPin(const HostPin&) = delete;
  HostPin& operator=(const HostPin&) = delete;

 private:
  void* p_ = nullptr;
};

// A dedicated stream for device -> pinned host copies (checkpoint snapshots)
// ordered after the compute stream's work up to the call, so the loop only
// waits for the copy, not for the writer.
class CopyStream {
 public:
  CopyStream();
  // Enqueue a copy of `bytes` from device `src` into `dst` (pinned) after
  // everything enqueued so far on `after`.
  void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t after);
  void sync();  // wait for every copy enqueued so far
  cudaStream_t get() const { return stream_.get(); }

 private:
  Stream stream_;
  Event ready_;
};

// Phase timer: start/stop record events on a stream; seconds() waits for
// the stop event. Reusable.
class EventTimer {
 public:
  EventTimer();
  void start(cudaStream_t s) { a_.record(s); }
  void stop(cudaStream_t s) { b_.record(s); }
  double seconds() const;

 private:
  Event a_, b_;
};

// NVTX range for profilers (no cost when no tool is attached).
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace st::cuda
