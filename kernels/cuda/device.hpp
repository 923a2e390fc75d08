// The CUDA device of the Device seam (lib/tensor/device.hpp), for the CUDA
// backend library: the GPU this rank selected, a caching allocator by
// MemCat (st::BlockCache over cudaMalloc; memory() reads its statistics),
// CUDA streams (the compute stream and non-blocking extra ones) and events
// with timing, copies, and pinned host memory (cudaHostAlloc). Every handle
// is RAII.
//
// How the ordering rules of device.hpp hold here:
//  - deallocate() hands the block back to the cache at once; the next
//    allocate() may return it to work that is enqueued later on the compute
//    stream, so it runs after the last use (every allocation is used on the
//    compute stream, or on a communicator stream that waits for it first).
//  - copy_from_host() copies the host bytes into a pinned staging ring on
//    the calling thread, then enqueues the DMA from there (cudaMemcpyAsync
//    from pageable memory may stage asynchronously, and from pinned memory
//    it never copies before returning); a ring slot is reused only after the
//    event recorded behind its DMA has completed. So the host buffer may be
//    reused as soon as the call returns.
//  - copy_to_host() is cudaMemcpyAsync: the host buffer is written when the
//    stream gets there (read it after a synchronize).
//  - enqueue() runs host work with cudaLaunchHostFunc: it must not call the
//    CUDA API (CUDA's rule for host functions); an exception it throws is
//    rethrown by the stream's next enqueue() or synchronize().
#pragma once
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <array>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/cuda_block_cache.hpp"
#include "tensor/device.hpp"

namespace st::cuda {

// Visible devices (0 when there is no GPU or no driver; never throws) and,
// when 0, why.
int device_count(std::string* why = nullptr);

// One GPU per rank, chosen by PCI bus id across the node's ranks (collective
// over `node`, the node-local communicator, through its front; nullptr:
// this rank alone): the rule of kernels/cuda/host/device_select.hpp (a rank seeing one
// GPU takes it, else its node-local rank's ordinal; no GPU taken twice).
// Sets it current. Returns "" and fills *ordinal and *name, or the reason it
// cannot (no device; more ranks than GPUs; a GPU two ranks would share,
// named by bus id; a GPU older than sm_80).
std::string select_device(Communicator* node, int* ordinal, std::string* name);

// The cudaStream_t of a stream of the CUDA device (throws for another kind).
cudaStream_t native(Stream& s);

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(bool timing = true);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void record(Stream& s) override { record(native(s)); }
  void record(cudaStream_t s);
  bool query() override;
  void synchronize() override;
  double seconds_since(Event& start) override;
  cudaEvent_t get() const { return e_; }
  bool recorded() const { return recorded_; }

 private:
  cudaEvent_t e_ = nullptr;
  bool timing_;
  bool recorded_ = false;
};

class CudaStream final : public Stream {
 public:
  // Non-blocking (no implicit ordering with the legacy default stream);
  // priority as cudaStreamCreateWithPriority (lower is more urgent).
  explicit CudaStream(std::string name, int priority = 0);
  ~CudaStream() override;  // waits for the stream's work first
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  const std::string& name() const override { return name_; }
  void wait(Event& e) override;
  void synchronize() override;
  void enqueue(std::function<void()> fn) override;
  void* native() const override { return s_; }
  cudaStream_t get() const { return s_; }
  // Run after every host synchronisation of this stream.
  void after_sync(std::function<void()> fn) { after_sync_.push_back(std::move(fn)); }
  void host_error(std::exception_ptr e);  // from a host function (any thread)

 private:
  void rethrow();
  std::string name_;
  cudaStream_t s_ = nullptr;
  std::vector<std::function<void()>> after_sync_;
  std::mutex mu_;
  std::exception_ptr error_;
};

class CudaDevice final : public Device {
 public:
  // Makes `ordinal` current on the calling thread (select_device chose it).
  CudaDevice(int ordinal, std::string name);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  bool host_memory() const override { return false; }
  std::string name() const override { return name_; }
  std::string id() const override { return "cuda:" + std::to_string(ordinal_); }
  bool host_accessible() const override { return false; }

  void* allocate(size_t bytes, MemCat cat) override;
  void deallocate(void* p, size_t bytes, MemCat cat) override;
  MemoryStats memory() const override;
  int64_t capacity_bytes() const override;  // cudaMemGetInfo's total
  void reset_peaks() override;

  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override;
  std::unique_ptr<Event> create_event() override;

  void copy(void* dst, const void* src, size_t bytes, Stream& s) override;
  void copy_to_host(void* host, const void* src, size_t bytes, Stream& s) override;
  void copy_from_host(void* dst, const void* host, size_t bytes, Stream& s) override;
  void fill_zero(void* p, size_t bytes, Stream& s) override;

  void* allocate_pinned(size_t bytes) override;
  void free_pinned(void* p) override;

  int ordinal() const { return ordinal_; }
  // cudaSetDevice(ordinal) on the calling thread unless it is current already.
  void make_current() const;
  // fn runs after every host synchronisation of the compute stream (the
  // NCCL communicators count their finished collectives there).
  void after_sync(std::function<void()> fn) { compute_->after_sync(std::move(fn)); }
  // Device bytes others hold outside the block cache (NCCL's, measured when
  // the communicators are made), counted in memory() under `cat`.
  void add_outside_cache(MemCat cat, int64_t bytes) { outside_[size_t(cat)] += bytes; }
  // Bytes the block cache holds from cudaMalloc.
  int64_t cache_reserved() const { return cache_.stats().reserved; }

 private:
  class Staging;  // the pinned ring behind copy_from_host
  int ordinal_;
  std::string name_;
  BlockCache cache_;
  std::unique_ptr<CudaStream> compute_;
  std::unique_ptr<Staging> staging_;
  std::array<int64_t, kMemCats> outside_{};
};
}  // namespace st::cuda
