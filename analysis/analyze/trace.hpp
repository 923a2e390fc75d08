// `scaletrain-analyze trace` and `hang`: one timeline of all ranks from the
// telemetry's trace records (Chrome Trace Event JSON for Perfetto UI and
// chrome://tracing, an SVG of one step, the last rank to arrive at each
// collective and the time the others waited for it), and the hang report
// from the flight recorder's dumps (docs/analysis.md).
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "telemetry/reader.hpp"

namespace st::analysis {

// One span on rank 0's clock.
struct TraceSpan {
  int rank = 0;
  std::string name, track;
  double t0 = 0, t1 = 0;  // epoch seconds, rank 0's clock
  int64_t step = 0, mb = -1, bytes = -1, seq = -1, group = -1;
};

// A collective as every member saw it: who arrived last, and by how much.
struct Arrival {
  std::string group;  // the track's group name
  int64_t group_root = 0, seq = 0, step = 0;
  std::string op;
  int members = 0;
  int last_rank = 0;
  double late_by_s = 0;  // last arrival - the arrival before it
  double waited_s = 0;   // sum over the others of (last arrival - their arrival)
};

struct Timeline {
  std::vector<TraceSpan> spans;       // every rank, in [first, last] steps
  std::vector<std::string> hosts;     // by rank
  std::vector<double> clock_error_s;  // by rank: the bound on its offset
  int64_t first = 0, last = 0;
  std::vector<Arrival> arrivals;
};

// Reads the run's trace records (steps [first, last]; -1 = all) and puts
// them on rank 0's clock (each rank's offset interpolated between its start
// and end measurements). Throws UsageError naming the file when the run has
// no trace records or no clock events.
Timeline build_timeline(const telemetry::RunTelemetry& run, int64_t first, int64_t last);

// Writes trace.json, step.svg, collectives.csv and waited.md into out_dir;
// returns their names.
std::vector<std::string> write_trace_outputs(const Timeline& t, const std::string& out_dir);

// The `trace` and `hang` sub-commands once cli.cpp has parsed their
// arguments: `steps` is "A..B" (either side may be empty) or "" for all,
// `out_dir` "" for DIR/analysis.
int trace_cli(const std::string& dir, const std::string& out_dir, const std::string& steps,
              std::ostream& out, std::ostream& err);
int hang_cli(const std::string& dir, std::ostream& out);
// `export --tensorboard OUT RUN...` (export_cli.cpp) once cli.cpp has parsed
// it: `runs` are run or campaign folders, `tb` the --tensorboard folder.
int export_cli(const std::vector<std::string>& runs, const std::string& tb, std::ostream& out);

// The hang report of a run folder (its flight/ dumps and run.json) as
// markdown; the first line names the collective and the ranks.
std::string hang_report(const std::string& run_dir);

}  // namespace st::analysis
