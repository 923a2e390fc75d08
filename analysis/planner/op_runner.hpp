// Runs one op of lib/plan/ops.hpp through the CPU backend's own kernels
// (kernels/ops.hpp's Ops, fp32, on the default CPU device) on filled buffers
// and times it: what `scaletrain-plan calibrate` measures, in process for one
// rank alone and inside the MPI probe for ranks sharing the node.
#pragma once
#include <atomic>
#include <vector>

#include "plan/ops.hpp"

namespace st::plan {

// Median seconds of one call, over repetitions filling at least
// `min_seconds` (and at least 3 after one warm-up call), cycling through
// copies of the buffers larger together than the last-level cache (a step's
// kernels read their inputs from memory, not cache); the fastest repetition
// on one hot set of buffers with `fastest` (the trainer's sgemm-peak
// convention). With `cpu_seconds`: also the median process CPU time of one
// call (the time a cgroup CPU quota charges).
double time_op(const Op& op, double min_seconds, bool fastest = false,
               double* cpu_seconds = nullptr);

// Seconds of one pass over `ops` (each op called once): the mean over back
// to back passes filling at least `min_seconds` (at least one), so that a
// window of many CFS periods pays a cgroup CPU quota, and ranks sharing
// cores their share, as a whole step does.
double time_ops_pass(const std::vector<Op>& ops, double min_seconds);

// How much slower this process computes over a whole step than in a short
// burst: one hot 256^3 sgemm timed (a) in 5 ms bursts that each follow
// 250 ms idle, and (b) back to back for `seconds`; the ratio of the mean
// times per call, (b) / (a). Under a cgroup CPU quota (CFS bandwidth control:
// `quota` of CPU time per 100 ms period, as scripts/emucluster.sh gives each
// emulated node) a burst shorter than the quota runs at full speed and a
// step pays the quota: the ratio is period / quota. Without a quota, about 1.
double sustained_slowdown(double seconds);

// Calls a hot 256^3 sgemm back to back until `stop` is set: keeps this
// process's cores (and a cgroup CPU quota) as busy as a step's compute
// does, for timing a collective as a step meets it.
void compute_until(const std::atomic<bool>& stop);

}  // namespace st::plan
