// The one clock for named phases of wall and CPU time, one after another
// (issue 55: one timing type where there were several): the trainer's
// start-up and exit (app/phase_clock.hpp summarises them over the ranks
// into run.json), and a checkpoint rank file's write (the ckpt_commit
// event's phases). Also this process's CPU time and age, which those and
// the telemetry header read.
#pragma once
#include <string>
#include <vector>

namespace st {

// CPU seconds this process has used so far, every thread (the clock a cgroup
// CPU quota counts).
double process_cpu_seconds();
// Seconds since this process started (its start time in /proc/self/stat, on
// the boot clock); 0 where that cannot be read.
double process_age_s();

struct PhaseTime {
  std::string name;
  double wall_s = 0, cpu_s = 0;
};

class PhaseClock {
 public:
  // Starts now; from_process_start: at the process's start as the kernel
  // records it (the first phase is then exec and library loading).
  explicit PhaseClock(bool from_process_start = false);
  // The phase since the previous mark (or the start) ends now.
  void mark(const std::string& name);
  // The same for a phase that ended earlier, at wall_time() `wall` with
  // `cpu` CPU seconds used by then.
  void mark_at(const std::string& name, double wall, double cpu);
  const std::vector<PhaseTime>& phases() const { return phases_; }
  double elapsed_s() const;  // wall seconds since the start

 private:
  std::vector<PhaseTime> phases_;
  double t0_ = 0, t_ = 0, c_ = 0;
};

}  // namespace st
