// `scaletrain-plan calibrate`: measures this machine and writes a CPU cluster
// file (configs/clusters/*.yaml, format in cluster.hpp and docs/planner.md):
//  - every kernel call the layouts of the given ranges would make (ops.hpp),
//    timed through the project's CPU kernels by one rank alone;
//  - the dense sgemm rate (768^3, the trainer's CPU peak convention);
//  - with scaletrain-plan-probe under mpiexec at each rank count: the
//    trainer's collectives at several sizes (fitted to latency + bytes /
//    bandwidth) and the slowdown of a block's compute when that many ranks
//    share the node's cores.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/space.hpp"

namespace st::plan {

struct CalibrateOptions {
  Config base;        // the model (and defaults for the knobs)
  KnobRanges ranges;  // ranges.devices: the rank counts to measure
  std::string out;    // cluster file to write
  std::string name = "cpu-local";
  double op_seconds = 0.05;   // per op timing budget
  double coll_seconds = 0.2;  // per collective and size (1 at least under a CPU quota)
  // Up to 32 MB: the engine's gradient buckets (parallel.bucket_mb, 25 MB by
  // default) are priced between measured sizes, not beyond them.
  std::vector<long> sizes = {4096, 65536, 1 << 20, 4 << 20, 16 << 20, 32 << 20};
  std::string command;  // the command line, recorded in the file
  // When set: start from this cluster file, time only the kernel calls it
  // lacks (another model's shapes) and keep its collectives and slowdowns.
  std::string add_to;
};

// Returns the process exit code; progress goes to `log`.
int calibrate(const CalibrateOptions& o, std::ostream& log);

// Least-squares latency + bytes/bandwidth fit of (bytes, seconds) points,
// weighted by 1/seconds^2 (relative error); latency >= 0.
Link fit_alpha_beta(const std::vector<std::pair<double, double>>& points);

}  // namespace st::plan
