// Runs one op of lib/plan/ops.hpp through the CPU backend's own kernels
// (kernels/ops.hpp's Ops, fp32, on the default CPU device) on filled buffers
// and times it: what `scaletrain-plan calibrate` measures, in process for one
// rank alone and inside the MPI probe for ranks sharing the node.
#pragma once
#include <vector>

#include "plan/ops.hpp"

namespace st::plan {

// Median seconds of one call, over repetitions filling at least
// `min_seconds` (and at least 3 after one warm-up call), cycling through
// copies of the buffers larger together than the last-level cache (a step's
// kernels read their inputs from memory, not cache); the fastest repetition
// on one hot set of buffers with `fastest` (the trainer's sgemm-peak
// convention).
double time_op(const Op& op, double min_seconds, bool fastest = false);

// Seconds of one pass over `ops` (each op called once), median over passes
// filling at least `min_seconds`.
double time_ops_pass(const std::vector<Op>& ops, double min_seconds);

}  // namespace st::plan
