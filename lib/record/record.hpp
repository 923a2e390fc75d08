// The recording backend: the three seams (Device, Ops, Communicator) in a
// form that computes nothing, so the trainer's own Model and Engine can run
// one step of any layout on a machine without its memory or its peers, and
// the planner and --dry-run read what that step does from one Recording:
//  - RecordDevice hands out addresses from an arithmetic range no process
//    has mapped (nothing is reserved, so an address-space limit does not
//    see the model; a host read of device memory faults instead of reading
//    garbage) and
//    counts the bytes of every live allocation by MemCat: the current bytes,
//    the peak of each category and of the total, and where in the step the
//    peak was reached (the kernel count, the last kernel and the caller's
//    phase label at that moment).
//  - RecordOps records every kernel call: the op, its shape (the op's own
//    dimension names, in signature order), dtype and stream.
//  - RecordCommunicator records every collective (kind, group, group size,
//    payload bytes as nccl-tests counts them, stream), issued by the
//    Communicator front as MPI's and NCCL's are; nothing runs, and a
//    poll (CommHandle::test) always says "in flight", so the engine waits
//    where it needs a result, not where a poll happened to find it done.
// Streams, events and handles are ordering only: nothing runs, but the
// Recording keeps the step's timeline (Item), in issue order: every kernel,
// collective and copy with its stream, each event recorded, each wait of a
// stream for an event or a collective and each host wait, so a time model
// can replay the step and overlap exactly what the engine overlaps. Links the seams only (no MPI,
// no CUDA, no kernels), as PyTorch's meta device and fake process group do.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/ops.hpp"
#include "tensor/device.hpp"

namespace st::record {

// Every kernel of kernels/ops.hpp, typed: what the planner prices by
// (lib/plan/recorded_step.cpp switches over it; a kernel added here without
// a price fails to compile there).
enum class Kernel : uint8_t {
  Gemm,
  Cast,
  Add,
  Scale,
  EmbeddingFwd,
  EmbeddingBwd,
  RmsnormFwd,
  RmsnormBwd,
  RopeFwd,
  RopeBwd,
  SwigluFwd,
  SwigluBwd,
  AttentionFwd,
  AttentionBwd,
  AttentionFwdBlock,
  AttentionBwdBlock,
  AttentionLseMerge,
  CePartial,
  CeRescale,
  CeFinish,
  LossAccumulate,
  CeBwd,
  Sumsq,
  Adamw,
  kCount
};
const char* kernel_name(Kernel k);  // the Ops method's name: "gemm", "attention_fwd", ...

// One kernel call. dims are the op's size arguments in signature order,
// named in `shape` (e.g. "M,N,K" for gemm).
struct KernelCall {
  Kernel kind = Kernel::Gemm;             // what it is
  std::string op;                         // its name (kernel_name(kind)), for people
  std::string shape;                      // names of dims: "M,N,K", "B,T,Hq,Hkv,hd", ...
  std::vector<int64_t> dims;              // their values
  DType t = DType::F32;                   // activation / input dtype
  DType out = DType::F32;                 // output dtype (gemm's C; else = t)
  bool trans_a = false, trans_b = false;  // gemm only
  std::string stream;                     // stream name it was enqueued on
  std::string phase;                      // the caller's phase label when recorded
  int64_t alloc_bytes = 0;                // device bytes allocated since the previous kernel call
};

// One collective on one rank.
struct CollCall {
  CollKind kind = CollKind::AllReduce;
  std::string group;  // the communicator's name: "tp", "dp_cp", "pp_f0", ... (a label)
  GroupAxis axis;     // the mesh axis it spans: what the planner prices by
  int ranks = 1;      // group size
  int64_t bytes = 0;  // nccl-tests size (all_reduce: the buffer; gathers: the whole output)
  DType t = DType::F32;
  std::string stream;  // the stream it is ordered after
  std::string phase;
  int64_t after_kernel = 0;  // kernels recorded before it (its place in the step)
  bool recv = false;         // an exchange that receives (pipeline boundary tensors)
  bool host = false;         // a blocking collective of host values (the loss, the norm, votes)
};

// A device copy (host to device, device to host, device to device) or fill.
enum class CopyDir : uint8_t { H2D, D2H, D2D, Fill };
struct CopyCall {
  CopyDir dir = CopyDir::D2D;
  int64_t bytes = 0;
  std::string stream;
  std::string phase;
};

// Where the total device memory peaked, and what was live then.
struct PeakAt {
  MemoryStats at;              // current bytes by category at the peak moment
  int64_t kernel_index = 0;    // kernels recorded before the peak allocation
  std::string last_kernel;     // the kernel recorded last before it ("" at start)
  std::string phase;           // the caller's phase label at that moment
  MemCat cat = MemCat::Other;  // category of the allocation that made the peak
  int64_t bytes = 0;           // its size
};

// One entry of the timeline, in the order the host issued it. Streams are
// numbered by first use (Recording::streams()).
struct Item {
  enum Kind : uint8_t {
    Kernel,    // ref: index in kernels()
    Coll,      // ref: index in collectives(); runs after `stream`'s work so far
    Copy,      // ref: index in copies()
    Mark,      // an event recorded on `stream` (ref -1)
    Wait,      // `stream` waits for item `ref` (a Mark or a Coll)
    HostWait,  // the host waits for item `ref`
  };
  Kind kind = Kernel;
  bool edge = false;  // issued inside an edge range (the stage's own work: embedding, head, loss)
  int32_t stream = 0;
  int32_t segment = -1;  // the open segment (begin_segment() count - 1); -1: outside every segment
  int64_t ref = -1;
};

// Everything one rank's run on the recording backend did. Thread-safe to
// append to (communication streams may run on other threads elsewhere; here
// every call is recorded on the caller's thread).
class Recording {
 public:
  // Whether its communicators join the process's flight recorder (made
  // after this is set). Off: the planner's and the start-up estimates'
  // recordings stay out of a job's hang dumps; a test compares the entries.
  void set_flight(bool on) { flight_ = on; }
  bool flight() const { return flight_; }
  void set_phase(std::string p);
  const std::string& phase() const { return phase_; }
  // Opens the next segment of the timeline (one per pipeline schedule op:
  // the engine opens a range around each, RecordBackend::ranges()) and
  // closes it: items issued outside every segment are the step's start
  // (before the first) and its end (after the last).
  void begin_segment();
  void end_segment();
  int segments() const { return segment_ + 1; }
  // Items issued while `on` are tagged edge: the stage's own work outside
  // its layers (the first stage's embedding, the last one's head and loss).
  void set_edge(bool on);

  // Ordering (record.cpp's streams, events and handles): the item index of
  // an event recorded on `stream`, a stream's wait for an item, a host wait.
  int64_t mark(const std::string& stream);
  void wait(const std::string& stream, int64_t item);
  void host_wait(int64_t item);

  void add(KernelCall k);
  void add(CollCall c);
  void add(CopyCall c);
  void alloc(MemCat cat, int64_t bytes);
  void free(MemCat cat, int64_t bytes);
  void reset_peaks();

  const std::vector<KernelCall>& kernels() const { return kernels_; }
  const std::vector<CollCall>& collectives() const { return colls_; }
  const std::vector<CopyCall>& copies() const { return copies_; }
  const std::vector<Item>& items() const { return items_; }
  const std::vector<std::string>& streams() const { return streams_; }
  // The item index of the last collective recorded (-1: none).
  int64_t last_collective() const { return last_coll_; }
  const MemoryStats& memory() const { return mem_; }
  const PeakAt& peak() const { return peak_; }
  int64_t allocations() const { return allocations_; }
  void clear();  // calls and peaks; the live bytes stay (they are still allocated)
  // Moves the calls, the timeline and the stream names out (the recording
  // is then cleared of them).
  void take(std::vector<KernelCall>& kernels, std::vector<CollCall>& colls,
            std::vector<CopyCall>& copies, std::vector<Item>& items,
            std::vector<std::string>& streams);

 private:
  mutable std::mutex mu_;
  bool flight_ = false;
  std::string phase_;
  std::vector<KernelCall> kernels_;
  std::vector<CollCall> colls_;
  std::vector<CopyCall> copies_;
  std::vector<Item> items_;
  std::vector<std::string> streams_;
  int32_t segment_ = -1;
  bool open_ = false, edge_ = false;  // a segment is open; edge items
  int64_t pending_alloc_ = 0, last_coll_ = -1;
  int32_t stream_id(const std::string& name);                       // mu_ held
  void push(Item::Kind k, const std::string& stream, int64_t ref);  // mu_ held
  MemoryStats mem_;
  PeakAt peak_;
  int64_t allocations_ = 0;
};

// The Device. Addresses are arithmetic, in a range that is never mapped
// (record.cpp, kSpaceBase): nothing is reserved, they are distinct for live
// allocations and may be offset into and compared, but reading or writing
// one faults. Pinned host memory is real host memory (the caller writes
// into it).
class RecordDevice final : public Device {
 public:
  explicit RecordDevice(Recording& rec, std::string name = "record");
  ~RecordDevice() override;
  // Behaves as a GPU does: its memory is not the host's.
  bool host_memory() const override { return false; }
  std::string name() const override { return name_; }
  std::string id() const override { return "record:0"; }
  bool host_accessible() const override { return false; }

  void* allocate(size_t bytes, MemCat cat) override;
  void deallocate(void* p, size_t bytes, MemCat cat) override;
  MemoryStats memory() const override { return rec_.memory(); }
  void reset_peaks() override { rec_.reset_peaks(); }

  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override;
  std::unique_ptr<Event> create_event() override;

  void copy(void* dst, const void* src, size_t bytes, Stream& s) override;
  void copy_to_host(void* host, const void* src, size_t bytes, Stream& s) override;
  void copy_from_host(void* dst, const void* host, size_t bytes, Stream& s) override;
  void fill_zero(void* p, size_t bytes, Stream& s) override;

  void* allocate_pinned(size_t bytes) override;
  void free_pinned(void* p) override;

  Recording& recording() { return rec_; }

 private:
  Recording& rec_;
  std::string name_;
  std::unique_ptr<Stream> compute_;
  std::mutex mu_;
  char* base_ = nullptr;  // the first address of the arithmetic range (never mapped)
  size_t reserved_ = 0, next_ = 0;
  std::map<size_t, std::vector<char*>> free_;  // freed blocks by rounded size, reused first
};

// The Ops: every call recorded, nothing computed. copy_to_host reads of a
// loss or a norm therefore see zeros (finite).
std::unique_ptr<Ops> make_record_ops(Recording& rec);

// A group of `size` ranks in which this process is `rank`: every collective
// (device, or host values on stream "host") is recorded; nothing runs, its
// waits return at once (on the timeline) and a poll finds it in flight;
// host reductions leave the values as they are. It is a HostGroup, so a
// Mesh of them stands in for the MPI groups.
class RecordCommunicator final : public HostGroup {
 public:
  RecordCommunicator(Recording& rec, std::string name, int rank, int size);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void all_reduce_sum(double*, int64_t n) override { host(n, DType::F64); }
  void all_reduce_max(double*, int64_t n) override { host(n, DType::F64); }
  void all_reduce_sum(float*, int64_t n) override { host(n, DType::F32); }
  std::unique_ptr<HostGroup> dup_group(const std::string& name) const override {
    auto g = std::make_unique<RecordCommunicator>(rec_, name, rank_, size_);
    g->set_axis(axis());  // the same ranks: the same axis
    return g;
  }

 protected:
  // The front (communicator.hpp) has checked, counted and opened the
  // flight-recorder entry; this records the call on the timeline.
  std::shared_ptr<CommOp> issue(const Collective& c, Stream* after) override;
  void copy_local(void* dst, const void* src, size_t bytes, Stream& after) override;

 private:
  void host(int64_t n, DType t);
  Recording& rec_;
  std::string name_;
  int rank_, size_;
};

}  // namespace st::record
