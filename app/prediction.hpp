// The run's own prediction, written into run.json at start ("prediction"):
// the peak device memory by category that the recording backend gives for
// this layout (the first rank of each pipeline stage, the largest kept),
// and the step time by part, tokens/s and MFU of the planner's time model
// (st::plan::predict_step) on a cluster file. The cluster file is
// runtime.cluster, else $SCALETRAIN_CLUSTER_FILE, else for CPU ranks the source tree's
// configs/clusters/cpu-local.yaml; when there is none, or it lacks the
// measurements this layout needs, the step-time part is absent with the
// reason instead (scaletrain-analyze prints it). docs/telemetry.md.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.hpp"

namespace st {

nlohmann::json predict_run(const Config& cfg, int world);
// Adds predict_run's answer to the run.json at `path` (rank 0, after
// write_run_json). Never throws: a failure is recorded as the reason.
void add_prediction(const std::string& path, const Config& cfg, int world);

}  // namespace st
