// scaletrain-analyze export --tensorboard OUT RUN...: TensorBoard event
// files of finished runs and whole campaigns, one sub-folder of OUT per run
// (lib/tensorboard: the same scalars rank 0 writes live). A sub-command of
// its own so the main parser (cli.cpp) only dispatches to it.
#include <iostream>

#include "analyze/trace.hpp"
#include "core/error.hpp"
#include "tensorboard/tensorboard.hpp"

namespace st::analysis {

int export_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const char* usage =
      "usage: scaletrain-analyze export --tensorboard OUT RUN...\n"
      "  RUN: a run folder, or a campaign folder (its run folders); each run's rank-0\n"
      "  telemetry becomes OUT/<run folder name>/events.out.tfevents.* (docs/tensorboard.md)\n";
  std::string tb;
  std::vector<std::string> pos;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      out << usage;
      return 0;
    }
    if (a == "--tensorboard") {
      if (i + 1 >= args.size())
        throw UsageError("export: --tensorboard needs a folder\n" + std::string(usage));
      tb = args[++i];
    } else if (a.rfind("--tensorboard=", 0) == 0) {
      tb = a.substr(14);
    } else if (a.rfind("--", 0) == 0) {
      throw UsageError("export: unknown option '" + a + "' (valid: --tensorboard OUT)\n" + usage);
    } else {
      pos.push_back(a);
    }
  }
  if (tb.empty()) throw UsageError("export: --tensorboard OUT is required\n" + std::string(usage));
  if (pos.empty()) throw UsageError("export: needs run or campaign folders\n" + std::string(usage));
  std::vector<std::string> runs;
  for (const auto& p : pos)
    for (auto& r : tensorboard::run_folders(p)) runs.push_back(r);
  for (const auto& e : tensorboard::export_runs(runs, tb))
    out << e.run_dir << " -> " << e.out_dir << ": " << e.steps << " steps, " << e.events
        << " events, " << e.scalars << " scalars\n";
  (void)err;
  return 0;
}

}  // namespace st::analysis
