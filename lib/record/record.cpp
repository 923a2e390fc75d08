// The recording Device and Communicator, and the Recording they append to
// (record.hpp). record_ops.cpp holds the recording Ops.
#include "record/record.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.hpp"

namespace st::record {

// ---- Recording ----
void Recording::set_phase(std::string p) {
  std::lock_guard<std::mutex> g(mu_);
  phase_ = std::move(p);
}

int32_t Recording::stream_id(const std::string& name) {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (streams_[i] == name) return int32_t(i);
  streams_.push_back(name);
  return int32_t(streams_.size() - 1);
}

void Recording::push(Item::Kind k, const std::string& stream, int64_t ref) {
  items_.push_back(Item{k, edge_, stream_id(stream), open_ ? segment_ : -1, ref});
}

void Recording::begin_segment() {
  std::lock_guard<std::mutex> g(mu_);
  ST_CHECK(!open_, "recording: segment ", segment_, " is still open");
  ++segment_;
  open_ = true;
}

void Recording::end_segment() {
  std::lock_guard<std::mutex> g(mu_);
  open_ = false;
}

void Recording::set_edge(bool on) {
  std::lock_guard<std::mutex> g(mu_);
  edge_ = on;
}

int64_t Recording::mark(const std::string& stream) {
  std::lock_guard<std::mutex> g(mu_);
  push(Item::Mark, stream, -1);
  return int64_t(items_.size()) - 1;
}

void Recording::wait(const std::string& stream, int64_t item) {
  std::lock_guard<std::mutex> g(mu_);
  if (item >= 0 && item < int64_t(items_.size())) push(Item::Wait, stream, item);
}

void Recording::host_wait(int64_t item) {
  std::lock_guard<std::mutex> g(mu_);
  if (item >= 0 && item < int64_t(items_.size())) push(Item::HostWait, "host", item);
}

void Recording::add(KernelCall k) {
  std::lock_guard<std::mutex> g(mu_);
  k.phase = phase_;
  k.alloc_bytes = pending_alloc_;
  pending_alloc_ = 0;
  push(Item::Kernel, k.stream, int64_t(kernels_.size()));
  kernels_.push_back(std::move(k));
}

void Recording::add(CollCall c) {
  std::lock_guard<std::mutex> g(mu_);
  c.phase = phase_;
  c.after_kernel = int64_t(kernels_.size());
  push(Item::Coll, c.stream, int64_t(colls_.size()));
  last_coll_ = int64_t(items_.size()) - 1;
  colls_.push_back(std::move(c));
}

void Recording::add(CopyCall c) {
  std::lock_guard<std::mutex> g(mu_);
  c.phase = phase_;
  push(Item::Copy, c.stream, int64_t(copies_.size()));
  copies_.push_back(std::move(c));
}

void Recording::alloc(MemCat cat, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  const size_t i = size_t(cat);
  mem_.current[i] += bytes;
  mem_.current_total += bytes;
  if (mem_.current[i] > mem_.peak[i]) mem_.peak[i] = mem_.current[i];
  ++allocations_;
  pending_alloc_ += bytes;
  if (mem_.current_total > mem_.peak_total) {
    mem_.peak_total = mem_.current_total;
    peak_.at = mem_;
    peak_.kernel_index = int64_t(kernels_.size());
    peak_.last_kernel = kernels_.empty() ? "" : kernels_.back().op;
    peak_.phase = phase_;
    peak_.cat = cat;
    peak_.bytes = bytes;
  }
}

void Recording::free(MemCat cat, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  mem_.current[size_t(cat)] -= bytes;
  mem_.current_total -= bytes;
  ST_CHECK(mem_.current[size_t(cat)] >= 0, "recording device: more ", memcat_name(cat),
           " bytes freed than allocated");
}

void Recording::reset_peaks() {
  std::lock_guard<std::mutex> g(mu_);
  mem_.peak = mem_.current;
  mem_.peak_total = mem_.current_total;
  peak_ = PeakAt{};
  peak_.at = mem_;
  peak_.kernel_index = int64_t(kernels_.size());
  peak_.phase = phase_;
}

void Recording::clear() {
  {
    std::lock_guard<std::mutex> g(mu_);
    kernels_.clear();
    colls_.clear();
    copies_.clear();
    items_.clear();
    segment_ = -1;
    open_ = false;
    edge_ = false;
    pending_alloc_ = 0;
    last_coll_ = -1;
    allocations_ = 0;
  }
  reset_peaks();
}

void Recording::take(std::vector<KernelCall>& kernels, std::vector<CollCall>& colls,
                     std::vector<CopyCall>& copies, std::vector<Item>& items,
                     std::vector<std::string>& streams) {
  std::lock_guard<std::mutex> g(mu_);
  kernels = std::move(kernels_);
  colls = std::move(colls_);
  copies = std::move(copies_);
  items = std::move(items_);
  streams = streams_;
  kernels_.clear(), colls_.clear(), copies_.clear(), items_.clear();
}

// ---- streams, events and handles: ordering only, kept on the timeline ----
namespace {

class RecordEvent final : public Event {
 public:
  explicit RecordEvent(Recording& rec) : rec_(rec) {}
  void record(Stream& s) override { item_ = rec_.mark(s.name()); }
  bool query() override { return true; }
  void synchronize() override { rec_.host_wait(item_); }
  double seconds_since(Event&) override { return 0; }
  int64_t item() const { return item_; }

 private:
  Recording& rec_;
  int64_t item_ = -1;  // never recorded: waits for it are no-ops
};

class RecordStream final : public Stream {
 public:
  RecordStream(Recording& rec, std::string name) : rec_(rec), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void wait(Event& e) override {
    if (auto* r = dynamic_cast<RecordEvent*>(&e)) rec_.wait(name_, r->item());
  }
  void synchronize() override { rec_.host_wait(rec_.mark(name_)); }
  // Host work in stream order would read device memory: nothing runs.
  void enqueue(std::function<void()>) override {}

 private:
  Recording& rec_;
  std::string name_;
};

// A recorded collective: nothing to wait for, but a poll says "still in
// flight", as one on a real link would be when polled right after its
// launch; so the engine leaves its wait where it needs the result (a
// bucket's staging buffer wanted again, the step's end), and the replay,
// not the poll, decides whether that wait costs anything. Its waits go on
// the timeline.
class DoneOp final : public CommOp {
 public:
  DoneOp(Communicator& c, const Collective& k, Recording& rec, int64_t item)
      : CommOp(c, k), rec_(rec), item_(item) {}
  bool test() override { return false; }
  bool waits_itself() override { return true; }
  void wait_self() override { rec_.host_wait(item_); }
  void wait_stream(Stream& s) override { rec_.wait(s.name(), item_); }

 private:
  Recording& rec_;
  int64_t item_;
};

constexpr size_t kAlign = 256;  // as cudaMalloc
size_t rounded(size_t bytes) { return (bytes == 0 ? 1 : bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

// ---- RecordDevice ----
// Addresses are arithmetic: offsets from kSpaceBase, a range no process can
// have mapped, so nothing is reserved (an address-space limit, ulimit -v,
// does not see the recorded model at all) and any host read or write of a
// recorded buffer faults at once (SIGSEGV) instead of reading garbage. The
// range starts at 2^55: above the 47-bit user space of x86-64 with 4-level
// page tables (there the addresses are not even canonical) and above the
// 48- or 52-bit user space of AArch64; with 5-level tables (56-bit user
// space) Linux maps above 2^47 only for a caller that asks with a hint that
// high. Pointer arithmetic, views and comparisons work as on any device
// memory (the model and the engine offset into flat buffers and compare
// send and receive pointers); kAlign-aligned like cudaMalloc.
static_assert(sizeof(void*) == 8, "the recording device needs a 64-bit address space");
constexpr uintptr_t kSpaceBase = uintptr_t(1) << 55;
constexpr size_t kSpaceBytes = size_t(1) << 54;  // 16 PiB of live and freed blocks

RecordDevice::RecordDevice(Recording& rec, std::string name)
    : rec_(rec),
      name_(std::move(name)),
      compute_(std::make_unique<RecordStream>(rec, "compute")),
      base_(reinterpret_cast<char*>(kSpaceBase)),
      reserved_(kSpaceBytes) {}

RecordDevice::~RecordDevice() = default;

void* RecordDevice::allocate(size_t bytes, MemCat cat) {
  const size_t r = rounded(bytes);
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = free_.find(r);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      ST_CHECK(next_ + r <= reserved_, "recording device: ", reserved_ >> 40,
               " TiB of arithmetic address space used up by live and freed blocks");
      p = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(base_) + next_);
      next_ += r;
    }
  }
  rec_.alloc(cat, int64_t(bytes));
  return p;
}

void RecordDevice::deallocate(void* p, size_t bytes, MemCat cat) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    free_[rounded(bytes)].push_back(static_cast<char*>(p));
  }
  rec_.free(cat, int64_t(bytes));
}

std::unique_ptr<Stream> RecordDevice::create_stream(const std::string& name) {
  return std::make_unique<RecordStream>(rec_, name);
}

std::unique_ptr<Event> RecordDevice::create_event() { return std::make_unique<RecordEvent>(rec_); }

void RecordDevice::copy(void*, const void*, size_t bytes, Stream& s) {
  rec_.add(CopyCall{CopyDir::D2D, int64_t(bytes), s.name(), ""});
}

void RecordDevice::copy_to_host(void* host, const void*, size_t bytes, Stream& s) {
  // Nothing was computed: the host reads zeros (a finite loss and norm).
  std::memset(host, 0, bytes);
  rec_.add(CopyCall{CopyDir::D2H, int64_t(bytes), s.name(), ""});
  s.synchronize();  // the host reads it
}

void RecordDevice::copy_from_host(void*, const void*, size_t bytes, Stream& s) {
  rec_.add(CopyCall{CopyDir::H2D, int64_t(bytes), s.name(), ""});
}

void RecordDevice::fill_zero(void*, size_t bytes, Stream& s) {
  rec_.add(CopyCall{CopyDir::Fill, int64_t(bytes), s.name(), ""});
}

void* RecordDevice::allocate_pinned(size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

void RecordDevice::free_pinned(void* p) { std::free(p); }

// ---- RecordCommunicator ----
RecordCommunicator::RecordCommunicator(Recording& rec, std::string name, int rank, int size)
    : rec_(rec), name_(std::move(name)), rank_(rank), size_(size) {
  ST_CHECK(size >= 1 && rank >= 0 && rank < size, "recording communicator '", name_, "': rank ",
           rank, " of ", size);
  // In the flight recorder (when the recording asks) as a group of ranks
  // 0..size-1: it has no world.
  if (!rec_.flight()) return;
  std::vector<int> ranks(size_t(size), 0);
  for (int r = 0; r < size; ++r) ranks[size_t(r)] = r;
  join_flight(ranks);
}

std::shared_ptr<CommOp> RecordCommunicator::issue(const Collective& k, Stream* after) {
  CollCall c;
  c.recv = k.receives;
  c.kind = k.kind;
  c.group = name_;
  c.axis = axis();
  c.ranks = size_;
  c.bytes = k.bytes;
  c.t = k.t;
  c.host = k.host;
  c.stream = after ? after->name() : "host";
  rec_.add(std::move(c));
  auto op = std::make_shared<DoneOp>(*this, k, rec_, rec_.last_collective());
  op->finish();  // complete at once: counted, and done in the flight recorder
  return op;
}

void RecordCommunicator::copy_local(void*, const void*, size_t bytes, Stream& after) {
  rec_.add(CopyCall{CopyDir::D2D, int64_t(bytes), after.name(), ""});
}

void RecordCommunicator::host(int64_t n, DType t) {
  Collective c;
  c.kind = CollKind::AllReduce;
  c.t = t;
  c.n = n;
  run_host(c);  // blocking: the host waits, on the timeline
}

}  // namespace st::record
