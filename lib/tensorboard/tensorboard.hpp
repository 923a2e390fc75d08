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

// Rank 0's live writer. open() makes the folder and the file (UsageError
// naming the folder when it cannot); start() reads run.json for the rates.
// record() takes every telemetry record (TelemetryWriter's observer): a
// failed write is reported once through `warn` and ends the TensorBoard
// output, never the training.
class LiveWriter {
 public:
  explicit LiveWriter(const std::string& dir) : file_(dir) {}
  void start(const std::string& run_json_path) { facts_ = run_facts_from_file(run_json_path); }
  void record(const nlohmann::json& rec, const std::function<void(const std::string&)>& warn);
  const std::string& path() const { return file_.path(); }

 private:
  EventFile file_;
  RunFacts facts_;
  bool failed_ = false;
};

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
