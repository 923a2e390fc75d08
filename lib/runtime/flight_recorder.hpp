// The collective flight recorder, one per process.
//
// Flight recorder: every communicator keeps a ring of its last N collectives
// (sequence number, op, bytes, enqueue/start/end times, state). The ranks of
// a group issue its collectives in the same order, so (group, seq) names the
// same collective on every member. When the job ends abnormally (a timeout,
// a watchdog abort, a peer's request, a signal, an error) the rings are
// written to RUN_DIR/flight/rank_NNNNN.json, which `scaletrain-analyze hang`
// matches across ranks (docs/analysis.md); its first field names the schema
// (kSchema), which the reader checks. Recording is one uncontended mutex and
// a few stores per event.
//
// At trace level `collectives` (runtime.trace) each finished collective is
// also a span of the step's trace (core/span_log.hpp). Times are this host's
// wall clock (epoch seconds); the telemetry's clock events give each rank's
// offset to rank 0.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace st::flight {

// The dump's schema, written first in every dump and checked by its reader
// (analysis/analyze/hang.cpp): bump it when a field changes meaning.
inline constexpr const char* kSchema = "scaletrain.flight/1";

// Where dump() writes ("" = nowhere yet), this rank's identity and the ring
// size per communicator (0 turns the recorder off). Collectives also go to
// the span log (core/span_log.hpp) at its level `collectives`.
void configure(const std::string& path, int world_rank, const std::string& host, int entries);

// One communicator's ring of its last collectives. The Communicator front
// (lib/comm/communicator.hpp) owns one per communicator and writes it
// directly: one uncontended mutex per event, no lookup.
struct Ring;

// A communicator joins the recorder; `world_ranks` are its members in group
// rank order. Returns its ring, or null when recording is off. The recorder
// keeps it too, so a dump after the communicator is gone still lists it.
std::shared_ptr<Ring> add_ring(const std::string& name, const std::vector<int>& world_ranks);

// A collective on ring `g`: enqueued (returns its sequence number), started
// on its stream, finished. Cheap; safe from any thread.
uint64_t enqueue(Ring& g, const char* op, int64_t bytes);
void start(Ring& g, uint64_t seq);
void finish(Ring& g, uint64_t seq);

// What a ring holds now, oldest first (tests compare implementations by it).
struct EntryView {
  uint64_t seq = 0;
  std::string op;
  int64_t bytes = 0;
  std::string state;  // enqueued, started, done
};
std::vector<EntryView> entries(Ring& g);
std::string ring_name(Ring& g);

// What the rank is doing outside collectives ("forward mb 2", "checkpoint
// write"): kept for the dump. `what` must outlive the program (a literal).
void note_phase(const char* what, long step);

// Writes the rings (tmp + rename) with `reason`; returns false when
// unconfigured or the write failed. Safe to call from several threads;
// each call rewrites the file with the newest state.
bool dump(const std::string& reason);

// The offset of this host's clock to rank 0's (seconds to add), for the dump.
void set_clock_offset(double offset_s, double error_s);

}  // namespace st::flight
