// The planner against a published Llama-class training benchmark: torchtitan's
// Llama 3.1 8B/70B/405B tables on H100 (8 to 512 GPUs, FSDP, TP, PP, CP) and
// a published torchtitan run on H200 (analysis/reference/torchtitan_llama3.csv,
// provenance in analysis/reference/README.md). Every row is planned with the
// layout, batch, sequence and checkpointing it ran with, on the cluster file
// of its GPU; the result is the predicted tokens/s per GPU and peak memory
// beside the published ones, and the mean absolute percentage error.
#pragma once
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/space.hpp"

namespace st::plan {

struct PublishedRow {
  int line = 0;  // in the CSV
  std::string table, gpu, model, pp_schedule, act_ckpt, precision;
  int gpus = 0, fsdp = 0, tp = 1, pp = 1, cp = 1, seq_len = 0;
  int local_batch = 0, global_batch = 0, micro_batches = 1;
  bool compile = false, async_tp = false;
  double tps_gpu = 0, memory_gib = 0;
  Config cfg;  // the model (from the models CSV) and the row's run settings
};
// Reads the table and its models CSV; UsageError names file:line and column.
std::vector<PublishedRow> read_published(const std::string& table_csv,
                                         const std::string& models_csv);

struct PublishedResult {
  const PublishedRow* row = nullptr;
  Candidate plan;  // the row's layout as scaletrain-plan sizes and times it
  double error() const { return plan.time.tokens_per_s_device / row->tps_gpu - 1; }
};
// Plans every row; `clusters_dir` holds the cluster files (configs/clusters),
// priced by their fitted `profile` (torchtitan is not our trainer:
// fitted_pricing).
std::vector<PublishedResult> predict_published(const std::vector<PublishedRow>& rows,
                                               const std::string& clusters_dir,
                                               const std::string& profile = kPublishedProfile);
// Mean |error| over the timed rows that match `precision` ("" for all).
double published_mape(const std::vector<PublishedResult>& res, const std::string& precision);
// The table (markdown), each timed row's predicted step parts (compute by
// kind, exposed and total communication by group), and the MAPE lines
// (Float8 rows apart: the trainer has no fp8 path).
void write_published(const std::vector<PublishedResult>& res, std::ostream& out);

}  // namespace st::plan
