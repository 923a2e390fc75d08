// The CPU devices of device.hpp. The default one is inline: a stream runs
// work the moment it is enqueued and an event is the time it was recorded,
// so the generic model and engine cost nothing extra on CPU ranks; its
// memory comes from a caching allocator (the CUDA device's BlockCache over
// malloc), so the activations a step frees are reused by the next one
// instead of going back to the kernel and faulting their pages in again.
// The strict one gives each stream a worker thread with a queue, delays
// frees to the compute stream, and fills every fresh allocation with NaN, so
// code that would race or read garbage on a GPU produces wrong numbers in a
// CPU test instead. Both count the bytes they hand out in MemStats, exactly.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/util.hpp"
#include "tensor/cuda_block_cache.hpp"
#include "tensor/device.hpp"

namespace st {
namespace {

void* host_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  // Large blocks own whole pages (they may be page-locked in place).
  const size_t align = bytes >= (size_t(64) << 10) ? 4096 : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

// ---- inline ----
class InlineStream final : public Stream {
 public:
  explicit InlineStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void wait(Event&) override {}
  void synchronize() override {}
  void enqueue(std::function<void()> fn) override { fn(); }
  bool runs_inline() const override { return true; }

 private:
  std::string name_;
};

class InlineEvent final : public Event {
 public:
  void record(Stream&) override { t_ = wall_time(); }
  bool query() override { return true; }
  void synchronize() override {}
  double seconds_since(Event& start) override { return t_ - static_cast<InlineEvent&>(start).t_; }

 private:
  double t_ = 0;
};

// ---- strict: a worker thread per stream ----
class WorkerStream final : public Stream {
 public:
  explicit WorkerStream(std::string name) : name_(std::move(name)) {
    thread_ = std::thread([this] { run(); });
  }
  ~WorkerStream() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::string& name() const override { return name_; }
  void enqueue(std::function<void()> fn) override { enqueue_marked(std::move(fn)); }
  // Enqueues fn and returns its position: the worker has run it once
  // passed(position) holds.
  uint64_t enqueue_marked(std::function<void()> fn) {
    rethrow();
    uint64_t m;
    {
      std::lock_guard<std::mutex> g(mu_);
      q_.push_back(std::move(fn));
      m = ++enqueued_;
    }
    cv_.notify_all();
    return m;
  }
  void wait(Event& e) override;
  void synchronize() override {
    std::unique_lock<std::mutex> g(mu_);
    const uint64_t target = enqueued_;
    done_cv_.wait(g, [&] { return executed_ >= target; });
    g.unlock();
    rethrow();
  }
  // Whether the worker has passed a position.
  bool passed(uint64_t m) {
    std::lock_guard<std::mutex> g(mu_);
    return executed_ >= m;
  }
  void wait_passed(uint64_t m) {
    std::unique_lock<std::mutex> g(mu_);
    done_cv_.wait(g, [&] { return executed_ >= m; });
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        fn = std::move(q_.front());
        q_.pop_front();
      }
      try {
        if (!failed_) fn();
      } catch (...) {
        std::lock_guard<std::mutex> g(mu_);
        if (!error_) error_ = std::current_exception();
        failed_ = true;
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        ++executed_;
      }
      done_cv_.notify_all();
    }
  }
  void rethrow() {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> g(mu_);
      e = error_;
    }
    if (e) std::rethrow_exception(e);
  }
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> q_;
  uint64_t enqueued_ = 0, executed_ = 0;
  bool stop_ = false, failed_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

class WorkerEvent final : public Event {
 public:
  void record(Stream& s) override {
    auto& ws = static_cast<WorkerStream&>(s);
    auto t = std::make_shared<std::atomic<double>>(0.0);
    const uint64_t m = ws.enqueue_marked([t] { t->store(wall_time()); });
    std::lock_guard<std::mutex> g(mu_);
    stream_ = &ws;
    mark_ = m;
    t_ = std::move(t);
  }
  bool query() override {
    auto [s, m] = where();
    return !s || s->passed(m);
  }
  void synchronize() override {
    auto [s, m] = where();
    if (s) s->wait_passed(m);
  }
  double seconds_since(Event& start) override {
    synchronize();
    start.synchronize();
    auto& o = static_cast<WorkerEvent&>(start);
    return time() - o.time();
  }

  std::pair<WorkerStream*, uint64_t> where() {
    std::lock_guard<std::mutex> g(mu_);
    return {stream_, mark_};
  }
  double time() {
    std::lock_guard<std::mutex> g(mu_);
    return t_ ? t_->load() : 0.0;
  }

 private:
  std::mutex mu_;
  WorkerStream* stream_ = nullptr;
  uint64_t mark_ = 0;
  std::shared_ptr<std::atomic<double>> t_;
};

void WorkerStream::wait(Event& e) {
  // The worker blocks until the event's stream has passed its mark.
  // The position is read now: re-recording or destroying the event later
  // does not change what this wait waits for.
  auto [s, m] = static_cast<WorkerEvent&>(e).where();
  if (s && s != this) enqueue([s = s, m = m] { s->wait_passed(m); });
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(bool strict) : strict_(strict) {
    if (strict_) {
      compute_ = std::make_unique<WorkerStream>("compute");
    } else {
      compute_ = std::make_unique<InlineStream>("compute");
      cache_ = std::make_unique<BlockCache>(
          &host_alloc, [](void* p) { std::free(p); },
          /*feed_memstats=*/false);
    }
  }
  bool host_memory() const override { return true; }
  std::string name() const override { return "cpu"; }
  std::string id() const override { return strict_ ? "cpu-strict" : "cpu"; }
  // The strict device plays a GPU: the host may not read its memory in
  // place, so checkpoints take the staged path (copy_to_host into pinned
  // buffers, copy_from_host on restore) a GPU takes, in every CPU test.
  bool host_accessible() const override { return !strict_; }

  void* allocate(size_t bytes, MemCat cat) override {
    const double t0 = wall_time();
    void* p = nullptr;
    if (strict_) {
      p = host_alloc(bytes);
      std::memset(p, 0xff, bytes);  // NaN in fp32 and bf16, -1 in int32
    } else {
      p = cache_->allocate(bytes, cat);
    }
    MemStats::add(cat, int64_t(bytes));
    add_alloc_seconds(wall_time() - t0);
    return p;
  }
  void deallocate(void* p, size_t bytes, MemCat cat) override {
    if (!p) return;
    const double t0 = wall_time();
    MemStats::add(cat, -int64_t(bytes));
    if (strict_)
      compute_->enqueue([p] { std::free(p); });
    else
      cache_->free(p);
    add_alloc_seconds(wall_time() - t0);
  }
  double take_alloc_seconds() override { return alloc_s_.exchange(0.0); }
  MemoryStats memory() const override { return MemStats::snapshot(); }
  void reset_peaks() override { MemStats::reset_peaks(); }

  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    if (strict_) return std::make_unique<WorkerStream>(name);
    return std::make_unique<InlineStream>(name);
  }
  std::unique_ptr<Event> create_event() override {
    if (strict_) return std::make_unique<WorkerEvent>();
    return std::make_unique<InlineEvent>();
  }

  void copy(void* dst, const void* src, size_t bytes, Stream& s) override {
    if (bytes) s.enqueue([=] { std::memmove(dst, src, bytes); });
  }
  void copy_to_host(void* host, const void* src, size_t bytes, Stream& s) override {
    copy(host, src, bytes, s);
  }
  void copy_from_host(void* dst, const void* host, size_t bytes, Stream& s) override {
    if (!bytes) return;
    if (s.runs_inline()) {
      std::memcpy(dst, host, bytes);
      return;
    }
    // The caller may reuse `host` at once: take a copy now.
    auto data = std::make_shared<std::vector<char>>(static_cast<const char*>(host),
                                                    static_cast<const char*>(host) + bytes);
    s.enqueue([dst, data] { std::memcpy(dst, data->data(), data->size()); });
  }
  void fill_zero(void* p, size_t bytes, Stream& s) override {
    if (bytes) s.enqueue([=] { std::memset(p, 0, bytes); });
  }
  void* allocate_pinned(size_t bytes) override { return host_alloc(bytes); }
  void free_pinned(void* p) override { std::free(p); }

 private:
  void add_alloc_seconds(double s) {
    double cur = alloc_s_.load();
    while (!alloc_s_.compare_exchange_weak(cur, cur + s)) {
    }
  }
  bool strict_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<BlockCache> cache_;  // inline device only
  std::atomic<double> alloc_s_{0.0};
};
}  // namespace

Device& cpu_device() {
  static CpuDevice d(false);
  return d;
}

Device& cpu_strict_device() {
  static CpuDevice d(true);
  return d;
}
}  // namespace st
