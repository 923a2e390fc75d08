// Per-phase wall and CPU time (core/phase_clock.hpp) of the trainer's start-up (the process's start
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

#include "core/phase_clock.hpp"

namespace st {

class MpiCommunicator;

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
