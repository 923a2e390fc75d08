// scaletrain-plan's outputs for a ranked layout space: plan.md (summary, the
// top K with their memory and time parts, the infeasible layouts nearest the
// memory limit, the reasons layouts were refused), plan.csv and plan.json
// (every layout), the plots (predicted throughput against predicted peak
// memory; the feasibility frontier: the best throughput reachable within
// each memory budget), and campaign.yaml for slurm/campaigns/mfu_sweep.sh
// (the top K plus the infeasible layouts nearest the memory limit).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "plan/cluster.hpp"
#include "plan/space.hpp"
#include "planner/summary.hpp"

namespace st::plan {

struct ReportOptions {
  int top = 10;  // layouts in the table and the campaign
  int near = 2;  // infeasible layouts nearest the limit added to the campaign
  bool plots = true;
  std::string out_dir;
  std::string campaign_name;  // default plan-<model>-<devices>
  int campaign_steps = 20;
  std::string command;  // the invocation, recorded
};

// Writes everything into o.out_dir and prints the Markdown summary to `out`.
// Returns the number of layouts predicted feasible (none: plan.md lists the
// nearest over the memory limit with their memory parts).
int write_plan(const std::vector<Candidate>& cands, const Config& base, const Cluster& cl,
               const ReportOptions& o, std::ostream& out);

// The campaign YAML text (docs/campaigns.md format) for these layouts.
// Throws UsageError when the model is not a preset mfu_sweep.sh can name.
std::string campaign_yaml(const std::vector<const Candidate*>& layouts, const Config& base,
                          const Cluster& cl, const std::string& name, int steps);

// The weak-scaling projection: per size, the fastest feasible layout at the
// fixed per-device batch; writes weak_scaling.md/.csv/.json and a plot.
std::vector<WeakPoint> write_weak_scaling(const std::vector<Candidate>& cands,
                                          const std::vector<int>& sizes, const Cluster& cl,
                                          const ReportOptions& o, std::ostream& out);

}  // namespace st::plan
