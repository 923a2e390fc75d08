// The replay of a step's recorded stages on a cluster's prices (the model
// step_time.cpp's header describes): the record's timeline, its prices, and
// PipelineReplay, which walks every stage's items together. Internal to
// lib/plan: predict_step (time_model.hpp) is the interface.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "parallel/pipeline.hpp"
#include "plan/quota.hpp"
#include "plan/rates.hpp"
#include "plan/recorded_step.hpp"

namespace st::plan {

// The class of an item in the step's parts: compute (gemm, attention,
// elementwise, optimizer), then one per part of the step a collective
// belongs to, in CommPart's order (core/step_parts.hpp: the one list).
enum Cls : uint8_t { kGemm, kAttn, kElem, kOptim, kComm, kNone = kComm + kCommParts };
inline constexpr Cls cls_of(CommPart p) { return Cls(kComm + ix(p)); }
inline constexpr Cls kPp = cls_of(CommPart::Pp);
inline constexpr bool is_comm(Cls c) { return c >= kComm && c < kNone; }

// The cluster-independent view of a record the replay needs, built once per
// record: each item's clock (stream or communicator) and class, and the
// distinct calls it prices (a step repeats the same few shapes).
struct Timeline {
  struct Coll {
    CollPrice kind;
    int64_t bytes;
    int ranks;
    GroupAxis axis;  // the mesh axis it spans (stride; node flag of the recorded mesh)
  };
  std::vector<Op> ops;              // distinct kernel calls and copies
  std::vector<int64_t> allocs;      // distinct allocation sizes (bytes)
  std::vector<Coll> colls;          // distinct collectives
  std::vector<int32_t> ref, alloc;  // per item: index in ops / colls; allocs
  std::vector<Cls> cls;
  std::vector<uint8_t> edge;  // the stage's own work (embedding, head, loss)
  std::vector<int32_t> lane;  // clock of the item: a stream, or a communicator
  int lanes = 0, compute = 0;
  std::vector<std::pair<size_t, size_t>> seg;  // item range of each segment
  size_t head_end = 0, tail_begin = 0;
};

// One stage's record, priced: seconds of every item.
struct Priced {
  std::shared_ptr<const StageRecord> rec;
  std::shared_ptr<const Timeline> tl;
  std::vector<double> dur;
  // Runs of kernels and copies on one clock within one segment (all edge
  // work or none), replayed as one step: the run starting at item i ends at
  // run_end[i], takes run_dur[i] and adds run_part[i] to the compute parts
  // (gemm, attention, elementwise, optimizer).
  std::vector<uint32_t> run_end;
  std::vector<double> run_dur;
  std::vector<std::array<double, 4>> run_part;
  std::vector<double> attn_flops;  // per item: attention FLOPs as priced (attention_price)
};

// The replay of one stage.
struct Replay {
  const Priced* pr = nullptr;
  std::vector<PipeOp> ops;  // the full schedule
  std::vector<int> tmpl;    // recorded segment of each op
  std::vector<double> clock, done;
  std::vector<Cls> cause;  // what each item's completion waited for last
  double host = 0;
  size_t op = 0, pos = 0;  // next op (ops.size(): the tail) and item within it
  bool head = true, finished = false, recv_used = false;
  double sent = -1;  // when the op's send was issued (-1: none yet)
  // The stage's own work in its ops (not edge work): the compute stream's
  // kernels and copies and the collectives it runs inline, in seconds.
  double work = 0;
  double scale = 1;   // every item's duration times this (the even replay)
  double cscale = 1;  // kernels and copies times this: the node's sharing (ReplayOpts)
  // The node's quota followed through the step (ReplayOpts::quota): where
  // the compute stream's kernels and copies end.
  QuotaClock quota;
  // Polls: collectives issued and not yet complete, in issue order. They
  // progress only while the issuing thread waits for a collective.
  struct Pending {
    size_t item;
    double earliest;  // no progress before (a receive: its send's issue)
    double rem;       // seconds of it left
  };
  std::vector<Pending> pending;
  // The compute stream's busy intervals, when asked for (ReplayOpts::busy).
  std::vector<std::pair<double, double>> busy;
  // Parts.
  double part[kNone + 1] = {};  // compute seconds by class (kernels, copies)
  double total[kNone + 1] = {}, exposed[kNone + 1] = {}, bubble = 0;
  int64_t pp_recv_wait = -1;  // a pipeline receive's wait: split into pp and bubble
};

// How the stages are replayed beside the prices. polls: collectives on a
// communicator's clock progress only while the issuing thread waits for a
// collective (Cluster::async_progress false); cscale: per stage, its
// kernels and copies times this (ranks of other stages sharing its node);
// busy: keep each stage's compute-stream intervals; quota: per stage, the
// clock of a node holding only its ranks (ranks 0: none; cscale then 1).
struct ReplayOpts {
  bool polls = false;
  std::vector<double> cscale;
  bool busy = false;
  std::vector<QuotaClock> quota;
};

// Every stage replayed over the full schedule, together. `scale` empty: as
// recorded; else the even pipeline: no stage carries edge work (embedding,
// head, loss) and stage s's other items take scale[s] times as long, so
// every stage's ops take as long as one stage's. Each stage runs as far as
// its dependencies allow (a pipeline receive waits for its neighbour's
// send), round after round, until every stage is done.
class PipelineReplay {
 public:
  PipelineReplay(const Config& cfg, const std::vector<Priced>& priced,
                 const std::vector<int>& stand_in, const std::vector<int>& slot,
                 const std::vector<double>& scale, const ReplayOpts& opt);
  std::vector<Replay> run();

 private:
  int pick(int micro) const;
  void set_up(int s, const Priced& pr, int recorded_stage, const std::vector<double>& scale);
  double end_of_run(Replay& r, int32_t L, double start, double priced) const;
  void note_busy(Replay& r, double b, double e) const;
  void progress_in_wait(Replay& r, double from, double to) const;
  double completes_at(const Replay& r, size_t j, double now) const;
  double send_finish(const PipeOp& o, int s) const;
  bool advance(int s);
  void run_plain(Replay& r, size_t i);
  void end_segment(Replay& r, int s);
  bool run_item(Replay& r, int s, size_t i, bool first_recv_pending, bool& used_recv);
  void run_kernel(Replay& r, size_t i, double dur, bool own);
  bool run_coll(Replay& r, int s, size_t i, double dur, bool own, bool first_recv_pending,
                bool& used_recv);
  void run_wait(Replay& r, size_t i);

  static constexpr double kUnknown = -1;
  const bool edge_;
  const int P_, v_, M_, V_, Mr_;
  const ReplayOpts& opt_;
  std::vector<Replay> rp_;
  // When each op's send was issued: its neighbour's receive starts then.
  std::vector<double> fin_f_, fin_b_;
};

// When stage r's last clock stops.
double end_of(const Replay& r);

}  // namespace st::plan
