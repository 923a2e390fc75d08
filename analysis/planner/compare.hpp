// `scaletrain-plan compare`: the predictions beside the measurements. For
// each run folder (run.json + telemetry, any layout) the planner rebuilds the
// run's resolved config from run.json, predicts its peak memory per pipeline
// stage and its step time on the cluster file, and sets them against what
// the run recorded: every rank's largest mem_peak_bytes against its stage's
// tracked prediction, and the steady-state step time (scaletrain-analyze's
// window and median, slowest rank per step) against the predicted step.
// Writes compare.md / .csv / .json with the errors and their mean absolute
// percentage error: the third command of plan -> campaign -> report.
// A CPU run that measured its sgemm rate at start (runtime.cpu_peak_gflops=0:
// every rank at once, so under the run's own sharing of the cores and the
// machine's load at that moment) also gets a prediction at that speed: the
// calibrated kernel times scaled by the calibrated peak over the run's, in
// place of the calibrated slowdown of shared cores. On a machine whose
// background load drifts, that separates the model's error from the drift.
// Each run is predicted on the cluster with its ranks on the nodes they ran
// on (run.json's "hosts": Cluster::rank_node, so a group crosses nodes in the
// prediction where it crossed in the run, whatever the placement) and the
// run's own node size (the most ranks on one host); a run whose ranks were
// not in consecutive blocks (mpirun --rank-by node) is marked in the table.
// The step's parts are set side by side:
// compute (fwd + bwd + optimizer), exposed communication and the rest of the
// step (measured: step - compute - exposed - data - checkpoint stall, the
// pipeline bubble and waits; predicted: the bubble).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/cluster.hpp"

namespace st::plan {

struct CompareRow {
  std::string run, layout;
  int ranks = 0;
  double mem_pred = 0, mem_meas = 0;    // bytes, worst rank (tracked by the trainer)
  double step_pred = 0, step_meas = 0;  // seconds
  double step_pred_rt = 0;              // at the run's measured speed (0: not measured)
  int ranks_per_node = 0;               // the most ranks on one host (the node size predicted with)
  bool block_placement = true;          // every host's ranks consecutive (the plan's default)
  double exposed_pred = 0, exposed_meas = 0;
  double compute_pred = 0, compute_meas = 0;  // fwd + bwd + optimizer, critical rank
  double bubble_pred = 0, other_meas = 0;     // bubble; measured: the step's unexplained rest
  double tok_s_pred = 0, tok_s_meas = 0, mfu_pred = 0, mfu_meas = 0;
  // The waits (step - fwd - bwd - optimizer: pipeline receives, exposed
  // collectives, the step's end) of the stage whose ranks wait longest,
  // measured (its slowest-waiting rank) and predicted for that same stage.
  int waits_stage = 0;
  double waits_pred = 0, waits_meas = 0;
  double waits_err() const { return waits_meas > 0 ? waits_pred / waits_meas - 1 : 0; }
  double mem_err() const { return mem_meas > 0 ? mem_pred / mem_meas - 1 : 0; }
  double step_err() const { return step_meas > 0 ? step_pred / step_meas - 1 : 0; }
  double exposed_err() const { return exposed_meas > 0 ? exposed_pred / exposed_meas - 1 : 0; }
  double step_rt_err() const {
    return step_meas > 0 && step_pred_rt > 0 ? step_pred_rt / step_meas - 1 : 0;
  }
};

// A run's resolved config, read back from run.json's "config" object.
Config config_from_run_json(const std::string& run_dir);

// Rows for the run folders; throws UsageError naming a bad folder.
std::vector<CompareRow> compare_runs(const std::vector<std::string>& dirs, const Cluster& cl);

// Writes compare.md, compare.csv, compare.json into out_dir and prints the
// Markdown table to `out`.
void write_compare(const std::vector<CompareRow>& rows, const Cluster& cl,
                   const std::string& out_dir, std::ostream& out);

}  // namespace st::plan
