// TensorBoard output of a run: rank 0's live writer (runtime.tensorboard:
// every telemetry record it writes, as it writes it, into
// <run>/tensorboard/) and the export of finished runs and campaigns
// (`scaletrain-analyze export --tensorboard OUT RUN...`: one sub-folder per
// run, so runs compare in one TensorBoard). Both turn records into scalars
// through scalars.hpp, so they give the same tags and values. docs/tensorboard.md.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorboard/event_file.hpp"
#include "tensorboard/scalars.hpp"

namespace st::tensorboard {

// The run folder's TensorBoard sub-folder: RUN/tensorboard.
inline std::string run_folder_dir(const std::string& run_dir) { return run_dir + "/tensorboard"; }

// Rank 0's live writer: one event stream per run folder, across resumes.
// The constructor makes the folder and a new file (UsageError naming the
// folder when it cannot); start() reads run.json for the rates and the
// records earlier starts of this folder wrote to `rank0_telemetry` (read
// before this start appends to it). record() takes every telemetry record
// (TelemetryWriter's observer); at the first step record, step S, it writes
// the earlier records first (their steps from S on left out: this start
// does them again) and removes the earlier starts' event files, so
// TensorBoard shows each step once. A failed write is reported once through
// `warn` and ends the TensorBoard output, never the training.
class LiveWriter {
 public:
  using Warn = std::function<void(const std::string&)>;
  explicit LiveWriter(const std::string& dir);
  ~LiveWriter();
  void start(const std::string& run_json_path, const std::string& rank0_telemetry,
             const Warn& warn);
  void record(const nlohmann::json& rec, const Warn& warn);
  const std::string& path() const { return file_.path(); }

 private:
  void catch_up(int64_t first_step, const Warn& warn);
  void write(const nlohmann::json& rec, const Warn& warn);
  std::vector<std::string> earlier_files_;  // the event files of earlier starts
  EventFile file_;
  RunFacts facts_;
  std::vector<nlohmann::json> earlier_, pending_;  // before the first step record
  bool started_ = false, caught_up_ = false, failed_ = false;
};

// Rank 0's step and event records (those with scalars) of a run's telemetry
// file in file order, a step done again (a resumed run) by its last record;
// UsageError naming the file (file:line when it is damaged).
std::vector<nlohmann::json> rank0_records(const std::string& rank0_telemetry_path);

struct ExportedRun {
  std::string run_dir, out_dir;
  long steps = 0, events = 0, scalars = 0;  // records written, scalar values in them
};

// The run folders an argument names: itself when it holds run.json, else its
// sub-folders that do (a campaign), sorted. UsageError when neither.
std::vector<std::string> run_folders(const std::string& arg);

// Writes the event file of each run (rank 0's telemetry, a replayed step's
// last record) into OUT/<run folder name> (a second run of the same name
// gets -2, -3, ...). UsageError naming the folder or file when OUT cannot be
// written, a run is unreadable, or OUT/<name> already holds event files.
std::vector<ExportedRun> export_runs(const std::vector<std::string>& runs, const std::string& out);

}  // namespace st::tensorboard
