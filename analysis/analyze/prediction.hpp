// Predicted beside measured for one run: the prediction the trainer wrote
// into run.json at start ("prediction", app/prediction.hpp) against what
// the run's telemetry measured (run_summary.hpp): step time and its compute
// and exposed-communication parts, tokens/s, MFU and peak memory, each with
// its error (predicted / measured - 1). A prediction the trainer could not
// make is shown with its reason.
#pragma once
#include <string>
#include <vector>

#include "analyze/run_summary.hpp"

namespace st::analysis {

struct PredictedRow {
  std::string what, unit;
  double predicted = 0, measured = 0;
  double error() const { return measured != 0 ? predicted / measured - 1 : 0; }
};
struct PredictionCheck {
  bool in_run_json = false;  // run.json has a "prediction" (runs before it had none)
  std::string cluster, time_absent, memory_absent;  // reasons when a part is missing
  std::vector<PredictedRow> rows;
};

PredictionCheck check_prediction(const RunSummary& s);
// The "## Predicted vs measured" section of report.md ("" without a prediction).
std::string prediction_markdown(const PredictionCheck& p);
// The campaign's "## Predicted vs measured" table: one row per run with its
// step time, MFU and peak memory predicted, measured and the error ("" when
// no run has a prediction).
std::string campaign_prediction_markdown(const std::vector<RunSummary>& runs);

}  // namespace st::analysis
