// scaletrain-analyze export --tensorboard OUT RUN...: TensorBoard event
// files of finished runs and whole campaigns, one sub-folder of OUT per run
// (lib/tensorboard: the same scalars rank 0 writes live). cli.cpp parses the
// options; this runs the export.
#include <iostream>

#include "analyze/trace.hpp"
#include "core/error.hpp"
#include "tensorboard/tensorboard.hpp"

namespace st::analysis {

int export_cli(const std::vector<std::string>& pos, const std::string& tb, std::ostream& out) {
  if (tb.empty())
    throw UsageError(
        "export: --tensorboard OUT is required (the folder the event files go to, one "
        "sub-folder per run)");
  std::vector<std::string> runs;
  for (const auto& p : pos)
    for (auto& r : tensorboard::run_folders(p)) runs.push_back(r);
  for (const auto& e : tensorboard::export_runs(runs, tb))
    out << e.run_dir << " -> " << e.out_dir << ": " << e.steps << " steps, " << e.events
        << " events, " << e.scalars << " scalars\n";
  return 0;
}

}  // namespace st::analysis
