// What scaletrain-plan concludes from a ranked layout space, computed apart
// from how it is written (report.cpp writes it): the counts by outcome and
// the reasons layouts were refused, the top feasible layouts, the nearest
// over the memory limit, the campaign's layouts, and the weak-scaling points.
// As analysis/analyze keeps its numbers apart from its Markdown.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "plan/space.hpp"

namespace st::plan {

struct PlanSummary {
  int feasible = 0, over = 0, invalid = 0;  // timed and fitting, timed and over, untimed
  std::map<std::string, int> why;           // refusal reason (grouped) -> layouts
  // Per device count (smallest first), the first `top` feasible in rank
  // order: --top ranks within each device count.
  std::vector<const Candidate*> top;
  // Over the limit, per device count, nearest first: `near` of them, at
  // least 3 for a count where none fits.
  std::vector<const Candidate*> nearest;
  // The runnable ones of `top`, then of the first `near` of `nearest` per count.
  std::vector<const Candidate*> campaign;
};

// cands in plan_space's order (feasible by throughput, then over the limit by
// excess, then invalid).
PlanSummary summarize_plan(const std::vector<Candidate>& cands, int top, int near);

struct WeakPoint {
  int devices = 0;
  const Candidate* best = nullptr;  // fastest feasible layout at that size (nullptr: none)
  double efficiency = 0;            // tokens/s/device against the smallest feasible size's
};
std::vector<WeakPoint> weak_points(const std::vector<Candidate>& cands,
                                   const std::vector<int>& sizes);

}  // namespace st::plan
