// The per-step span log of the telemetry's trace records (runtime.trace):
// completed spans (the trainer's phases, the model's forward and backward
// per micro-batch, and at level `collectives` every collective) are kept
// until the trainer takes them at the end of each step. In core, without
// MPI, so the model (which links no MPI) records its spans here too. Times
// are this host's wall clock in epoch seconds. Phase (below) opens a span and
// the device profiler's range of the same name together.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/ranges.hpp"

namespace st::spans {

enum class TraceLevel { kOff, kPhases, kCollectives };

void set_level(TraceLevel level);
TraceLevel level();
inline bool on() { return level() != TraceLevel::kOff; }

struct Span {
  std::string name;   // fwd, bwd, optim, all_reduce, ...
  std::string track;  // host, compute, comm:<group>
  double t0 = 0, t1 = 0;
  int mb = -1;         // micro-batch, when the phase has one
  int64_t bytes = -1;  // collectives
  int64_t seq = -1;    // collectives: sequence number on the group
  int group = -1;      // collectives: the group's lowest world rank
};
// Keeps a completed span (ignored when the level is off). Thread-safe.
void add(Span s);
// The spans completed since the last call, in completion order.
std::vector<Span> take();

// CLOCK_REALTIME in epoch seconds: the clock of the telemetry's times.
double epoch_now();

// A phase of the step for its scope's life: its span on `track` (when the
// trace is on) and, with the same name, the device profiler's range
// (ranges.hpp), so the CPU trace and the GPU timeline name it alike.
class Phase {
 public:
  explicit Phase(const char* name, const char* track = "host")
      : name_(name), track_(track), t0_(on() ? epoch_now() : 0.0), range_(name) {}
  ~Phase() {
    if (on()) add({name_, track_, t0_, epoch_now()});
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const char* name_;
  const char* track_;
  double t0_;
  ranges::Scope range_;
};

}  // namespace st::spans
