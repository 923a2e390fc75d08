// The scalars a telemetry record shows in TensorBoard: the one mapping from
// the telemetry schema (docs/telemetry.md) to TensorBoard tags, used by the
// live writer (rank 0, fed every record its TelemetryWriter writes) and by
// `scaletrain-analyze export --tensorboard` (fed the records of a finished
// run), so both give the same tags and values. No tag list is kept here:
// every number of a step record or an event becomes a scalar by the rule in
// docs/tensorboard.md, plus the rates the step record implies (tokens/s, MFU,
// HFU) from run.json's facts. No protobuf: the tests and the analysis use it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/reader.hpp"

namespace st::tensorboard {

// What the rates need from run.json (telemetry::RunInfo, read the same way
// live and after the run).
struct RunFacts {
  int world_size = 0;
  int seq_len = 0;
  double peak_flops = 0;           // per device, run.json device.peak_flops; 0: no MFU/HFU
  double model_flops_per_seq = 0;  // MPT/llm-foundry (lib/metrics), as scaletrain-analyze
  double hw_flops_per_seq = 0;     // model FLOPs plus recomputation (train.act_ckpt)
};
RunFacts run_facts(const telemetry::RunInfo& info);
// Reads run.json; throws UsageError naming the file and the field when it is bad.
RunFacts run_facts_from_file(const std::string& run_json_path);

struct Scalar {
  std::string tag;
  double value = 0;  // NaN for a JSON null (a loss that was not finite)
};

// One TensorBoard event's worth: the scalars of one telemetry record.
struct Scalars {
  int64_t step = 0;
  double wall_time = 0;  // step record: t_start + step_s; event: t
  std::vector<Scalar> values;
};

// The scalars of a telemetry record (a step record or an event); nullopt for
// records that have none (header, trace, an event without a step).
//   step record: a number F -> "train/F"; an object F's numbers -> "F/K[/K2]"
//                (mem_bytes/params, comm/all_reduce/s, kernel_s/gemm, ...);
//                and throughput/tokens_per_s, throughput/tokens_per_s_per_device
//                (global_tokens / step_s [/ world size]), utilization/mfu_percent,
//                utilization/hfu_percent (when run.json has a peak)
//   event E:     its numbers F -> "E/F" (eval/val_loss, ckpt_commit/stall_s, ...)
// `step`, `t_start` and `t` are the event's step and time, not scalars.
std::optional<Scalars> scalars_of(const nlohmann::json& record, const RunFacts& facts);

}  // namespace st::tensorboard
