// Per-phase wall and CPU time of the trainer's start-up (the process's start
// to the end of its first step) and of its exit (the end of the last step to
// MPI_Finalize): rank 0 logs them and run.json keeps them (`startup`,
// `exit`: each phase's slowest-rank wall time and its CPU time per rank), so
// a user sees where start-up goes and which part grows with the rank count.
// A phase's wall time includes waiting for the other ranks in its
// collectives; its CPU time is this process's own (every thread), which the
// load of a shared machine does not inflate.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace st {

class MpiCommunicator;

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

// The process's start-up phases: main() and setup_job() mark them, the loop
// marks the first step.
PhaseClock& startup_clock();

// Collective over `world` (every rank with the same phase names in the same
// order): {"phases": [{"name", "wall_s" (slowest rank), "cpu_s_mean",
// "cpu_s_max"}], "total_s" (slowest rank's elapsed_s), "cpu_s_mean",
// "ranks"}.
nlohmann::json summarize_phases(MpiCommunicator& world, const PhaseClock& c);
// One line for the log: "total 12.3 s (CPU 0.45 s/rank): mpi_init 3.1 s
// (CPU 0.2), ...".
std::string format_phases(const nlohmann::json& s);

// Adds `key`: summary to the run folder's run.json (rank 0; a warning on
// failure, as the prediction).
void add_to_run_json(const std::string& path, const std::string& key, const nlohmann::json& v);

}  // namespace st
