// The trainer's own engine, run on the recording backend (lib/record), for
// the layouts a plan shows: the first rank of every pipeline stage runs
// step 1, and the layout gets the largest of their device peaks (the bytes
// the trainer's allocator would hand out, what telemetry's mem_peak_bytes
// measures) beside the memory model's estimate. Recordings are kept per
// distinct layout and stage, so a layout shown twice is run once.
#pragma once
#include <vector>

#include "plan/space.hpp"

namespace st::plan {

// Fills recorded_peak / recorded_stage / recorded_error of the first `top`
// feasible candidates and the first `near` timed ones over the limit.
void record_shown(std::vector<Candidate>& cands, int top, int near);

}  // namespace st::plan
