// The `trace` and `hang` subcommands of scaletrain-analyze (trace.hpp,
// docs/analysis.md) once cli.cpp has parsed them: value checks, then the work
// and one summary line.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "analyze/trace.hpp"
#include "core/error.hpp"

namespace st::analysis {
namespace {

// "A..B" (either side may be empty) -> [first, last], -1 for open.
std::pair<int64_t, int64_t> parse_steps(const std::string& v) {
  const size_t dots = v.find("..");
  auto num = [&](const std::string& s) -> int64_t {
    if (s.empty()) return -1;
    if (s.find_first_not_of("0123456789") != std::string::npos || s.size() > 15)
      throw UsageError("--steps: '" + v + "' is not A..B with step numbers A <= B (e.g. 3..5)");
    return std::stoll(s);
  };
  if (dots == std::string::npos) {
    const int64_t s = num(v);
    if (s < 0) throw UsageError("--steps: empty value (expected A..B, e.g. 3..5)");
    return {s, s};
  }
  const int64_t a = num(v.substr(0, dots)), b = num(v.substr(dots + 2));
  if (a >= 0 && b >= 0 && a > b)
    throw UsageError("--steps: '" + v + "': the first step is after the last");
  return {a, b};
}

std::string run_dir_arg(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw UsageError(dir + ": not a folder");
  return dir;
}

}  // namespace

int trace_cli(const std::string& run_dir, const std::string& out_arg, const std::string& steps,
              std::ostream& out, std::ostream& err) {
  int64_t first = -1, last = -1;
  if (!steps.empty()) std::tie(first, last) = parse_steps(steps);
  const std::string dir = run_dir_arg(run_dir);
  const std::string out_dir = out_arg.empty() ? dir + "/analysis" : out_arg;
  auto run = telemetry::read_run(dir, 0, true);
  for (auto& w : run.warnings) err << "warning: " << w << "\n";
  if (!run.ok()) throw UsageError(run.errors.front());
  const Timeline t = build_timeline(run, first, last);
  const auto files = write_trace_outputs(t, out_dir);
  double worst = 0;
  for (double e : t.clock_error_s) worst = std::max(worst, e);
  std::map<int, double> waited;
  for (const auto& a : t.arrivals) waited[a.last_rank] += a.waited_s;
  int most = -1;
  for (const auto& [r, w] : waited)
    if (most < 0 || w > waited[most]) most = r;
  out << "steps " << t.first << ".." << t.last << ": " << t.spans.size() << " spans of "
      << run.ranks.size() << " rank(s), " << t.arrivals.size()
      << " collectives matched; clock offsets within " << worst * 1e6 << " us";
  if (most >= 0)
    out << "; others waited longest for rank " << most << " (" << waited[most] << " s)";
  out << "\nwrote " << out_dir << "/";
  for (size_t i = 0; i < files.size(); ++i) out << (i ? " " : "") << files[i];
  out << "\n";
  return 0;
}

int hang_cli(const std::string& run_dir, std::ostream& out) {
  const std::string dir = run_dir_arg(run_dir);
  const std::string report = hang_report(dir);
  std::filesystem::create_directories(dir + "/analysis");
  std::ofstream f(dir + "/analysis/hang.md");
  if (!f) throw Error("cannot write " + dir + "/analysis/hang.md");
  f << "# Hang report\n\n" << report;
  out << report << "wrote " << dir << "/analysis/hang.md\n";
  return 0;
}

}  // namespace st::analysis
