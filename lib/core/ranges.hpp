// Named ranges around the step's phases for a device profiler, and the
// profiler's capture window (runtime.profile_steps). The CUDA backend hands
// in a Sink that opens NVTX ranges and calls cudaProfilerStart/Stop
// (kernels/cuda/nvtx_ranges.cpp, through Backend::ranges()); on CPU ranks
// there is none and every call here is a test of one pointer. The phases
// open their range where they open their trace span (spans::Phase, the
// model's forward and backward), with the span's name, so a phase has one
// name on the CPU trace and the GPU timeline. In core (no MPI, no CUDA), so
// a CPU test runs all of it. docs/cuda.md.
#pragma once
#include <cstdint>
#include <string>

namespace st::ranges {

class Sink {
 public:
  virtual ~Sink() = default;
  // Opens a range nested in the open ones of this thread; pop closes the innermost.
  virtual void push(const char* name) = 0;
  virtual void pop() = 0;
  // Starts (true) or stops (false) the profiler's capture.
  virtual void capture(bool on) = 0;
};

// The process's sink (nullptr: none). Set once at start-up, before the first step.
void set_sink(Sink* s);
Sink* sink();

// An open range for the scope's life (nothing without a sink).
class Scope {
 public:
  explicit Scope(const char* name);
  explicit Scope(const std::string& name) : Scope(name.c_str()) {}
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Sink* s_;
};

// The range of a whole step: "step N".
std::string step_name(long step);
// A collective's range: "<op> comm:<group> <bytes>B", the trace span's name,
// track and bytes (docs/telemetry.md) in one line.
std::string collective_name(const char* op, const std::string& group, int64_t bytes);

// Steps [first, last] of runtime.profile_steps; empty() when not set.
struct StepWindow {
  long first = 0, last = -1;
  bool empty() const { return last < first; }
};
// "A-B" (1 <= A <= B), "A" (one step) or "" (none). UsageError naming `key`,
// the value and the valid form otherwise.
StepWindow parse_step_window(const std::string& key, const std::string& text);

// Starts the capture before the first step of the window the run reaches
// (a resumed run past A starts at its first step) and stops it after B, or
// at finish() when the run ends inside the window (a signal, train.stop_after).
class CaptureWindow {
 public:
  explicit CaptureWindow(StepWindow w) : w_(w) {}
  void begin_step(long step);
  void end_step(long step);
  void finish();
  bool capturing() const { return on_; }

 private:
  StepWindow w_;
  bool on_ = false, done_ = false;
};

}  // namespace st::ranges
