// Campaign analysis: one row per run (the MPT benchmark table's columns) and
// weak or strong scaling efficiency against the smallest run of each series.
#pragma once
#include <string>
#include <vector>

#include "analyze/run_summary.hpp"

namespace st::analysis {

struct Series {
  std::string model,
      kind;  // kind: "weak" (per-GPU batch fixed), "strong" (global batch fixed), "single"
  int base_gpus = 0;
  std::vector<size_t> runs;        // indices into Campaign::runs, ascending GPU count
  std::vector<double> efficiency;  // same order: tok/s(N) / (tok/s(base) * N/base)
};

struct Campaign {
  std::vector<RunSummary> runs;
  std::vector<Series> series;
  std::vector<std::string> warnings;
};

// Builds the scaling series. Without group_by_model, all runs form one series
// and runs of different models are refused (UsageError naming the runs).
Campaign build_campaign(std::vector<RunSummary> runs, bool group_by_model);

}  // namespace st::analysis
