// Telemetry reader: loads a run folder (run.json + telemetry/rank_NNNNN.jsonl)
// for the analysis tools. No MPI, no CUDA. Step records (the bulk: ranks x
// steps) go through a hand-rolled parser of the flat step object (see
// flatjson.hpp); header, events and run.json through nlohmann_json.
// Tolerant of a cut last line (a killed run), strict about everything else:
// each problem is reported as file:line with the field and value, and the rank
// is flagged, never silently dropped. Schema: docs/telemetry.md.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/step_parts.hpp"

namespace st::telemetry {

inline constexpr int kSchemaMajor = 1;         // "scaletrain.telemetry/1"
inline constexpr int kMaxWorldSize = 1 << 24;  // run.json world_size above this is refused
inline constexpr const char* kRunSchemaPrefix = "scaletrain.run/";

// One step of one rank. Times in seconds; absent optional fields are 0,
// a JSON null (the writer's NaN) is NaN.
struct StepRecord {
  int64_t step = 0;
  double t_start = 0, step_s = 0, data_s = 0, fwd_s = 0, bwd_s = 0, optim_s = 0;
  double comm_s = 0, comm_exposed_s = 0, ckpt_stall_s = 0;
  double cpu_s = 0;  // the rank's CPU seconds in the step; 0 in records without it
  int64_t tokens = 0, global_tokens = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  int64_t mem_peak_bytes = 0;
  // comm_wait_s by part, in comm_part_names() order (tp, cp, pp, dp, zero,
  // other); all 0 in records written before the field existed.
  std::array<double, kCommParts> comm_wait{};
  bool has_comm_wait = false;
  int line = 0;  // line number in the rank file (for messages)
  // The fields core/step_parts.hpp splits the step from.
  StepMeasured measured() const;
};

struct EventRecord {
  std::string event;
  int64_t step = -1;  // -1 when the event carries no step
  double t = 0;
  nlohmann::json fields;  // the whole record
  int line = 0;
};

// A trace record (runtime.trace), kept as its line for the trace analysis;
// only read_*(..., keep_traces = true) keeps them.
struct TraceRecord {
  int64_t step = 0;
  std::string text;
  int line = 0;
};

struct RankHeader {
  std::string schema, run_id, run_name, host, device, slurm_job_id, start_time;
  int rank = -1, world_size = 0, local_rank = 0, local_size = 0;
  std::map<std::string, int> mesh, coords;
};

// The rank's clock against rank 0's, from its `clock` events (MPI
// ping-pongs at the start and the end of the run): the offset interpolated
// between the two, the start's alone when the run has no end; a resumed run
// measures again, and the latest start wins. The one alignment every
// analysis uses (trace timelines, checkpoint costs, step starts).
struct RankClock {
  double t_start = 0, off_start = 0, t_end = 0, off_end = 0;
  double error_s = 0;  // the larger of the two measurements' error bounds
  bool have_start = false, have_end = false;
  double offset(double t) const;
  double to_rank0(double t) const { return t + offset(t); }
};

struct RankTelemetry {
  std::string path;
  RankHeader header;
  RankClock clock;                // from the clock events (offset 0 without any)
  std::vector<StepRecord> steps;  // ascending step; a resumed run's replay replaces
  std::vector<EventRecord> events;
  std::vector<TraceRecord> traces;    // only with keep_traces
  std::vector<std::string> errors;    // "file:line: ..." ; non-empty = rank flagged
  std::vector<std::string> warnings;  // tolerated: cut last line, replayed steps
  bool ok() const { return errors.empty(); }
};

// run.json, the fields the analysis needs (strictly typed; errors name field).
struct RunInfo {
  std::string schema, run_id, name, git_commit, version;
  int world_size = 0;
  std::map<std::string, int> mesh;  // dp tp pp cp
  struct Host {
    std::string name;
    std::vector<int> ranks;
  };
  std::vector<Host> hosts;
  std::string model_name;  // config.model.preset, else "" (reports derive one)
  int64_t n_params = 0;
  int n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, ffn_hidden = 0, vocab_size = 0;
  int seq_len = 0;
  int64_t global_batch = 0, global_batch_tokens = 0;
  int micro_batch = 0, grad_accum = 0, zero_stage = 0;
  std::string act_ckpt = "none", precision = "fp32";
  std::string device_name, device_kind, peak_source;
  // device.memory_capacity_bytes (-1: absent or unknown) and its source
  int64_t mem_capacity_bytes = -1;
  std::string mem_capacity_source;
  std::string precision_choice;  // device.precision_choice: why train.precision=auto chose
  double peak_flops = 0;         // device.peak_flops (0 when absent)
  nlohmann::json raw;            // the whole document
};

struct RunTelemetry {
  std::string dir;
  RunInfo info;
  std::vector<RankTelemetry> ranks;  // index = rank; missing files are errors
  std::vector<std::string> errors;   // run-level and every rank's, "file:line: ..."
  std::vector<std::string> warnings;
  bool ok() const { return errors.empty(); }
  std::vector<int> flagged_ranks() const;
};

// Parses one rank file. Never throws for content problems (they go to errors);
// throws st::UsageError only when the file cannot be opened.
RankTelemetry read_rank_file(const std::string& path, bool keep_traces = false);

// Parses run.json; problems are appended to errors as "path: field: ...".
RunInfo read_run_json(const std::string& path, std::vector<std::string>& errors);

// Reads a whole run folder; rank files in parallel on `threads` threads
// (0 = hardware concurrency). Missing rank files (per run.json world_size) and
// every rank's problems land in errors.
RunTelemetry read_run(const std::string& dir, int threads = 0, bool keep_traces = false);

// Parses the major version of a "scaletrain.telemetry/N" string; -1 if malformed.
int schema_major(const std::string& schema, const std::string& prefix);

namespace detail {
// An integer JSON value that T can hold without wrapping (reader and run.json).
template <typename T>
bool fits(const nlohmann::json& v) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
  const int64_t x = v.get<int64_t>();
  return x >= int64_t(std::numeric_limits<T>::min()) &&
         (x < 0 || uint64_t(x) <= uint64_t(std::numeric_limits<T>::max()));
}
}  // namespace detail

}  // namespace st::telemetry
