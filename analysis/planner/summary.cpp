// Implementation of summary.hpp.
#include "planner/summary.hpp"

#include <algorithm>

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
  for (const Candidate& c : cands)
    if (c.feasible && int(s.top.size()) < top) s.top.push_back(&c);
  const int n_near = s.feasible == 0 ? std::max(near, 3) : near;
  for (const Candidate& c : cands)
    if (!c.feasible && c.timed && int(s.nearest.size()) < n_near) s.nearest.push_back(&c);
  for (const Candidate* c : s.top)
    if (c->not_runnable.empty()) s.campaign.push_back(c);
  for (size_t i = 0; i < s.nearest.size() && int(i) < near; ++i)
    if (s.nearest[i]->not_runnable.empty()) s.campaign.push_back(s.nearest[i]);
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
