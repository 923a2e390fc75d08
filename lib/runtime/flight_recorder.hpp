// The collective flight recorder and the phase log, one per process.
//
// Flight recorder: every communicator keeps a ring of its last N collectives
// (sequence number, op, bytes, enqueue/start/end times, state). The ranks of
// a group issue its collectives in the same order, so (group, seq) names the
// same collective on every member. When the job ends abnormally (a timeout,
// a watchdog abort, a peer's request, a signal, an error) the rings are
// written to RUN_DIR/flight/rank_NNNNN.json, which `scaletrain-analyze hang`
// matches across ranks (docs/analysis.md). Recording is a mutex and a few
// stores per collective.
//
// Phase log: while tracing (runtime.trace), completed spans (the trainer's
// phases, and every collective at level `collectives`) are kept until the
// trainer takes them at the end of each step for the telemetry's trace
// record (docs/telemetry.md). Times are this host's wall clock (epoch
// seconds); the telemetry's clock events give each rank's offset to rank 0.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace st::flight {

enum class TraceLevel { kOff, kPhases, kCollectives };

// Where dump() writes ("" = nowhere yet), this rank's identity, the ring size
// per communicator (0 turns the recorder off) and the trace level.
void configure(const std::string& path, int world_rank, const std::string& host, int entries,
               TraceLevel level);
TraceLevel trace_level();

// A communicator joins the recorder; `world_ranks` are its members in group
// rank order. Returns its id for the calls below (-1 when recording is off).
int add_comm(const std::string& name, const std::vector<int>& world_ranks);

// A collective on comm `id`: enqueued (returns its sequence number), started
// on its stream, finished. Cheap; safe from any thread.
uint64_t enqueue(int id, const char* op, int64_t bytes);
void start(int id, uint64_t seq);
void finish(int id, uint64_t seq);

// What the rank is doing outside collectives ("forward mb 2", "checkpoint
// write"): kept for the dump. `what` must outlive the program (a literal).
void note_phase(const char* what, long step);

// One completed span for the phase log (ignored when tracing is off).
struct Span {
  std::string name;   // fwd, bwd, optim, data, all_reduce, ...
  std::string track;  // host, compute, comm:<group>, ckpt
  double t0 = 0, t1 = 0;
  int mb = -1;         // micro-batch, when the phase has one
  int64_t bytes = -1;  // collectives
  int64_t seq = -1;    // collectives: sequence number on the group
  int group = -1;      // collectives: the group's lowest world rank
};
void add_span(Span s);
// The spans completed since the last call, in completion order.
std::vector<Span> take_spans();

// Writes the rings (tmp + rename) with `reason`; returns false when
// unconfigured or the write failed. Safe to call from several threads;
// each call rewrites the file with the newest state.
bool dump(const std::string& reason);

// The offset of this host's clock to rank 0's (seconds to add), for the dump.
void set_clock_offset(double offset_s, double error_s);

}  // namespace st::flight
