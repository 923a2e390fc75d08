// Implementation of ckpt_cost.hpp.
#include "analyze/ckpt_cost.hpp"

#include <algorithm>
#include <limits>

namespace st::analysis {

double checkpoint_cost_s(const CkptCost& c) { return c.stall_s + std::max(0.0, c.interference_s); }

SteadyCkpt steady_checkpoints(const std::vector<CkptCost>& costs) {
  SteadyCkpt s;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (i == 0) {
      s.has_first = true;
      s.first_cost_s = checkpoint_cost_s(costs[i]);
      s.first_persist_s = costs[i].persist_s;
      continue;
    }
    s.cost_s.push_back(checkpoint_cost_s(costs[i]));
    s.persist_s.push_back(costs[i].persist_s);
  }
  return s;
}

std::vector<CkptCost> checkpoint_costs(const telemetry::RunTelemetry& run,
                                       const std::vector<int>& ranks,
                                       const std::map<int64_t, double>& gstep,
                                       const std::map<int64_t, double>& gstart,
                                       const std::map<int64_t, double>& stall, double median) {
  const double inf = std::numeric_limits<double>::infinity();
  std::map<int64_t, double> begin, commit;  // on rank 0's clock
  std::map<int64_t, int> commits;
  for (int r : ranks) {
    const telemetry::RankClock& clk = run.ranks[size_t(r)].clock;
    for (const auto& e : run.ranks[size_t(r)].events) {
      if (e.step < 0) continue;
      if (e.event == "ckpt_begin") {
        auto [it, fresh] = begin.try_emplace(e.step, inf);
        it->second = std::min(it->second, clk.to_rank0(e.t));
      } else if (e.event == "ckpt_commit") {
        auto [it, fresh] = commit.try_emplace(e.step, -inf);
        it->second = std::max(it->second, clk.to_rank0(e.t));
        ++commits[e.step];
      }
    }
  }
  std::vector<CkptCost> out;
  for (const auto& [step, tc] : commit) {
    if (commits[step] != int(ranks.size())) continue;  // not every rank committed
    CkptCost c;
    c.step = step;
    if (auto it = stall.find(step); it != stall.end()) c.stall_s = it->second;
    if (auto it = begin.find(step); it != begin.end()) c.persist_s = std::max(0.0, tc - it->second);
    // The steps after the save's own that started while the writer ran
    // (up to the next save, whose cost is its own).
    auto next = commit.upper_bound(step);
    for (auto it = gstep.upper_bound(step); it != gstep.end(); ++it) {
      if (next != commit.end() && it->first >= next->first) break;
      auto st = gstart.find(it->first);
      if (st == gstart.end() || st->second >= tc) break;
      c.interference_s += it->second - median;
      ++c.steps_during;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace st::analysis
