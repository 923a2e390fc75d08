// Implementation of summary.hpp.
#include "planner/summary.hpp"

#include <algorithm>
#include <set>

namespace st::plan {

PlanSummary summarize_plan(const std::vector<Candidate>& cands, int top, int near) {
  PlanSummary s;
  for (const Candidate& c : cands) {
    if (c.feasible)
      ++s.feasible;
    else if (c.timed)
      ++s.over;
    else
      ++s.invalid;
    if (c.feasible) continue;
    std::string k = c.reason.substr(0, c.reason.find(':'));
    if (k == "divisibility" || k == "unsupported") {
      // grouped by the first key named
      const auto a = c.reason.find_first_not_of(' ', k.size() + 1);
      const auto e = c.reason.find_first_of(" =", a);
      k += ": " + c.reason.substr(a, e - a);
    }
    ++s.why[k];
  }
  // Per device count, smallest first: the first `top` feasible and the
  // nearest over the limit (cands are ranked across all counts).
  std::set<int> counts;
  for (const Candidate& c : cands) counts.insert(c.devices);
  std::vector<const Candidate*> near_all;
  for (int n : counts) {
    int k = 0;
    for (const Candidate& c : cands)
      if (c.devices == n && c.feasible && k < top) s.top.push_back(&c), ++k;
    int feasible_n = 0;
    for (const Candidate& c : cands) feasible_n += c.devices == n && c.feasible;
    const int n_near = feasible_n == 0 ? std::max(near, 3) : near;
    k = 0;
    for (const Candidate& c : cands)
      if (c.devices == n && !c.feasible && c.timed && k < n_near) {
        s.nearest.push_back(&c), ++k;
        if (k <= near) near_all.push_back(&c);
      }
  }
  for (const Candidate* c : s.top)
    if (c->not_runnable.empty()) s.campaign.push_back(c);
  for (const Candidate* c : near_all)
    if (c->not_runnable.empty()) s.campaign.push_back(c);
  return s;
}

std::vector<WeakPoint> weak_points(const std::vector<Candidate>& cands,
                                   const std::vector<int>& sizes) {
  std::vector<WeakPoint> pts;
  for (int n : sizes) {
    WeakPoint w;
    w.devices = n;
    for (const Candidate& c : cands)
      if (c.devices == n && c.feasible &&
          (!w.best || c.time.tokens_per_s > w.best->time.tokens_per_s))
        w.best = &c;
    pts.push_back(w);
  }
  double base = 0;
  for (auto& w : pts)
    if (w.best) {
      if (base == 0) base = w.best->time.tokens_per_s_device;
      w.efficiency = w.best->time.tokens_per_s_device / base;
    }
  return pts;
}

}  // namespace st::plan
