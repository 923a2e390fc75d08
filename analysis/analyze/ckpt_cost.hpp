// Checkpoint cost in three parts, honest about asynchronous saves: the
// blocking stall (what the step waited), the background interference (the
// step time lost, against the window's median, by the steps that ran while
// the writer did), and the persistence time (snapshot start to commit).
// Used by the run report and summary.json (docs/analysis.md). The cost C
// that Young/Daly need is the steady state's: the median over a run's
// checkpoints after its first (the first pays one-time costs, reported apart).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "telemetry/reader.hpp"

namespace st::analysis {

struct CkptCost {
  int64_t step = 0;
  // The save's own stall: the slowest rank's ckpt_stall_s at the save's
  // step less that rank's wait for the previous save to finish (its
  // ckpt_commit `wait_prev_s`), which is the previous save outlasting the
  // interval, not this save's cost; reported apart.
  double stall_s = 0;
  double wait_prev_s = 0;     // the longest such wait of any rank (0 in sync mode)
  double interference_s = 0;  // sum over the steps after it that started before
                              // the commit of (global step time - median); signed
  int steps_during = 0;       // those steps
  double persist_s = 0;       // first rank's ckpt_begin to last rank's ckpt_commit
};

// One checkpoint's cost to the loop: its stall plus its background
// interference when positive (a save cannot make the steps faster).
double checkpoint_cost_s(const CkptCost& c);

// A run's checkpoints split into its first and the steady-state ones after it.
struct SteadyCkpt {
  bool has_first = false;
  double first_cost_s = 0, first_persist_s = 0;
  std::vector<double> cost_s, persist_s;  // every checkpoint after the first, in step order
};
SteadyCkpt steady_checkpoints(const std::vector<CkptCost>& costs);

// `gstep`: global (slowest rank) step time by step; `median`: the window's.
// Times of the ranks' events are put on rank 0's clock with their `clock`
// events when present. Saves without a commit are left out.
std::vector<CkptCost> checkpoint_costs(const telemetry::RunTelemetry& run,
                                       const std::vector<int>& ranks,
                                       const std::map<int64_t, double>& gstep,
                                       const std::map<int64_t, double>& gstart,
                                       const std::map<int64_t, double>& stall, double median);

}  // namespace st::analysis
