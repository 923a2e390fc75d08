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
  // From each rank's step record and ckpt_commit event: the longest wait
  // for the previous save, and the longest stall without it (-1: a rank's
  // event lacks the field, telemetry from before it: the step's stall as
  // recorded).
  std::map<int64_t, double> wait, own_stall;
  for (int r : ranks) {
    const telemetry::RankClock& clk = run.ranks[size_t(r)].clock;
    std::map<int64_t, double> step_stall;  // this rank's ckpt_stall_s (a step done again: its last)
    for (const auto& st : run.ranks[size_t(r)].steps) step_stall[st.step] = st.ckpt_stall_s;
    for (const auto& e : run.ranks[size_t(r)].events) {
      if (e.step < 0) continue;
      if (e.event == "ckpt_begin") {
        auto [it, fresh] = begin.try_emplace(e.step, inf);
        it->second = std::min(it->second, clk.to_rank0(e.t));
      } else if (e.event == "ckpt_commit") {
        auto [it, fresh] = commit.try_emplace(e.step, -inf);
        it->second = std::max(it->second, clk.to_rank0(e.t));
        ++commits[e.step];
        const auto& f = e.fields;
        const bool known = f.contains("wait_prev_s") && f["wait_prev_s"].is_number();
        const double w = known ? f["wait_prev_s"].get<double>() : 0.0;
        double& os = own_stall.try_emplace(e.step, 0.0).first->second;
        os = !known || os < 0 ? -1 : std::max(os, step_stall[e.step] - w);
        double& mw = wait.try_emplace(e.step, 0.0).first->second;
        mw = std::max(mw, w);
      }
    }
  }
  std::vector<CkptCost> out;
  for (const auto& [step, tc] : commit) {
    if (commits[step] != int(ranks.size())) continue;  // not every rank committed
    CkptCost c;
    c.step = step;
    if (auto it = stall.find(step); it != stall.end()) c.stall_s = it->second;
    c.wait_prev_s = wait[step];
    if (own_stall[step] >= 0) c.stall_s = std::max(0.0, own_stall[step]);
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
