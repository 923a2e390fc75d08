// The Device seam: where a backend's memory lives and how work on it is
// ordered. A Device allocates by category (the memory statistics that
// telemetry and the ZeRO tests read), owns streams and events, copies
// between host and device, and hands out pinned host memory. The model, the
// engine and the communicators only ever talk to this interface; the CPU
// device (cpu_device.cpp) and the CUDA device (kernels/cuda, loaded at run
// time) implement it.
//
// Ordering rules, the same on every device (a CPU test that breaks one fails
// under the strict CPU device, as it would on a GPU):
//  - Work enqueued on one stream runs in order. Work on different streams is
//    unordered unless a stream waits for an event recorded on the other.
//  - Device memory is never dereferenced on the host: results reach the host
//    through copy_to_host followed by a synchronize.
//  - allocate() returns memory with undefined contents (NaN-filled on the
//    strict CPU device). deallocate() is ordered on the compute stream: the
//    block may be reused by later work on that stream only. A buffer a
//    communication stream still uses must not be freed before that work is
//    known to be done (its handle waited on).
//  - copy_from_host takes its data when called: the host buffer may be
//    reused once the call returns. copy_to_host writes the host buffer when
//    the stream executes it: read it after a synchronize.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace st {

enum class MemCat { Params = 0, Grads, Optim, Activations, Comm, Workspace, Other, kCount };
const char* memcat_name(MemCat c);
constexpr size_t kMemCats = size_t(MemCat::kCount);

// Bytes in use by category, and their peaks since the last reset.
struct MemoryStats {
  std::array<int64_t, kMemCats> current{}, peak{};
  int64_t current_total = 0, peak_total = 0;
  int64_t cur(MemCat c) const { return current[size_t(c)]; }
  int64_t pk(MemCat c) const { return peak[size_t(c)]; }
};

class Stream;

class Event {
 public:
  virtual ~Event() = default;
  // Marks the current end of `s`: the event completes when the stream has
  // executed everything enqueued before it.
  virtual void record(Stream& s) = 0;
  virtual bool query() = 0;        // completed?
  virtual void synchronize() = 0;  // host waits for completion
  // Seconds between two completed events (start recorded first).
  virtual double seconds_since(Event& start) = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
  // Later work on this stream waits until `e` has completed.
  virtual void wait(Event& e) = 0;
  // Host waits for everything enqueued so far.
  virtual void synchronize() = 0;
  // Host work in stream order (CPU kernels, MPI calls of a CPU communicator).
  // On an inline stream it runs before enqueue returns.
  virtual void enqueue(std::function<void()> fn) = 0;
  // True when enqueued work has already run by the time enqueue returns (the
  // default CPU device): the host may then wait on communication directly.
  virtual bool runs_inline() const { return false; }
  virtual void* native() const { return nullptr; }  // cudaStream_t on the CUDA device
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu", or the GPU's product name
  virtual std::string id() const = 0;    // "cpu", "cuda:0"
  // The host may read device memory in place after a synchronize (the
  // inline CPU device): a checkpoint then skips the staging copies. The
  // strict CPU device says false (its pointers are host memory, which MPI
  // uses, but the host must go through copy_to_host as on a GPU).
  virtual bool host_accessible() const = 0;
  // Device pointers are host memory, so a host library (MPI) may read and
  // write them in stream order: true for both CPU devices, false on a GPU
  // and on the recording device.
  virtual bool host_memory() const = 0;

  virtual void* allocate(size_t bytes, MemCat cat) = 0;
  virtual void deallocate(void* p, size_t bytes, MemCat cat) = 0;
  virtual MemoryStats memory() const = 0;
  // Bytes of memory the device has in all (a GPU's total), -1 when it has
  // none of its own: CPU ranks share their host's (app/host_memory.hpp).
  virtual int64_t capacity_bytes() const { return -1; }
  virtual void reset_peaks() = 0;
  // Host seconds spent in allocate/deallocate since the last call (devices
  // that time them: the CPU ones; others report 0).
  virtual double take_alloc_seconds() { return 0; }

  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream(const std::string& name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;

  virtual void copy(void* dst, const void* src, size_t bytes, Stream& s) = 0;  // device to device
  virtual void copy_to_host(void* host, const void* src, size_t bytes, Stream& s) = 0;
  virtual void copy_from_host(void* dst, const void* host, size_t bytes, Stream& s) = 0;
  virtual void fill_zero(void* p, size_t bytes, Stream& s) = 0;

  // Page-locked host memory (plain host memory on the CPU device).
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) = 0;

  void synchronize() { compute_stream().synchronize(); }
};

// The process's default CPU device: inline streams (work runs as it is
// enqueued, events are timestamps), host memory counted in MemStats.
Device& cpu_device();
// The strict CPU device for tests: every stream runs in order on its own
// worker thread and fresh allocations are filled with NaN (all bits set),
// so a missing wait, a host read of device memory before a synchronize, or
// a read of memory nobody wrote shows up as wrong numbers on a CPU.
Device& cpu_strict_device();

// Process-wide byte accounting of host memory (the CPU devices report it).
struct MemStats {
  static void add(MemCat c, int64_t bytes);
  static int64_t current(MemCat c);
  static int64_t peak(MemCat c);
  static int64_t current_total();
  static int64_t peak_total();
  static void reset_peaks();  // peaks := current
  static MemoryStats snapshot();
};
}  // namespace st
