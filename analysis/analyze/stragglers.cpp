// Straggler analysis: per-rank and per-host skew of busy time (step time minus
// exposed communication: a slow rank computes longer while the others wait in
// collectives, so busy time, not step time, points at it), slowest ranks and
// hosts with their distance from the median, and ranks whose share of the
// step in one of its parts (core/step_parts.hpp) is out of line with the rest; with trace records,
// the time the others waited at collectives for each rank and host.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "analyze/run_summary.hpp"
#include "analyze/stats.hpp"
#include "analyze/trace.hpp"
#include "core/error.hpp"

namespace st::analysis {

namespace {
// The time the others waited for each rank and host: each collective's
// last arrival (trace.hpp) over the window's steps, summed. A run without
// trace records has no such section; one whose records cannot be aligned
// says why in the warnings.
void waited_for(const telemetry::RunTelemetry& run, const std::vector<int>& ranks,
                const std::set<int64_t>& window, RunSummary& s) {
  bool traced = false;
  for (int r : ranks) traced = traced || !run.ranks[size_t(r)].traces.empty();
  if (!traced || window.empty()) return;
  try {
    const Timeline t = build_timeline(run, *window.begin(), *window.rbegin());
    for (const Arrival& a : t.arrivals) {
      if (!window.count(a.step)) continue;
      s.waited_for_rank[a.last_rank] += a.waited_s;
      s.waited_for_host[t.hosts[size_t(a.last_rank)]] += a.waited_s;
    }
  } catch (const UsageError& e) {
    s.warnings.push_back(std::string("time others waited for each rank: not computed: ") +
                         e.what());
  }
}
}  // namespace

void compute_stragglers(const telemetry::RunTelemetry& run, const std::vector<int>& ranks,
                        const std::set<int64_t>& window, const Options& opt, RunSummary& s) {
  std::map<std::string, std::vector<int>> by_host;
  for (int r : ranks) {
    const auto& rt = run.ranks[r];
    std::vector<double> step, busy;
    std::array<std::vector<double>, kStepParts> shares;
    std::vector<std::pair<int64_t, double>> busy_steps;
    for (auto& st : rt.steps) {
      if (!window.count(st.step)) continue;
      step.push_back(st.step_s);
      busy.push_back(st.step_s - st.comm_exposed_s);
      busy_steps.emplace_back(st.step, busy.back());
      const StepParts sh = shares_of(split_step(st.measured()), st.step_s);
      for (size_t k = 0; k < kStepParts; ++k) shares[k].push_back(sh[k]);
    }
    RankStat rs;
    rs.rank = r;
    rs.host = rt.header.host;
    rs.step_med = median(step);
    rs.busy_med = median(busy);
    rs.busy_min = percentile(busy, 0);
    rs.busy_p25 = percentile(busy, 25);
    rs.busy_p75 = percentile(busy, 75);
    rs.busy_max = percentile(busy, 100);
    for (size_t k = 0; k < kStepParts; ++k) rs.part_share[k] = median(shares[k]);
    rs.busy_steps = std::move(busy_steps);
    by_host[rs.host].push_back(int(s.ranks.size()));
    s.ranks.push_back(rs);
  }
  if (s.ranks.empty()) return;
  std::vector<double> steps, busy;
  std::array<std::vector<double>, kStepParts> shares;
  for (auto& r : s.ranks) {
    steps.push_back(r.step_med);
    busy.push_back(r.busy_med);
    for (size_t k = 0; k < kStepParts; ++k) shares[k].push_back(r.part_share[k]);
  }
  const double med_busy = median(busy), med_step = median(steps);
  auto skew = [](const std::vector<double>& v, double med) {
    if (v.empty() || med <= 0) return 0.0;
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return (*hi - *lo) / med;
  };
  s.rank_step_skew = skew(steps, med_step);
  s.rank_busy_skew = skew(busy, med_busy);
  for (auto& r : s.ranks) r.dist = med_busy > 0 ? (r.busy_med - med_busy) / med_busy : 0;

  std::vector<int> order(s.ranks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return s.ranks[a].busy_med > s.ranks[b].busy_med; });
  for (size_t i = 0; i < order.size() && i < 5; ++i)
    s.slowest_ranks.push_back(s.ranks[order[i]].rank);

  std::vector<double> hb;
  for (auto& [h, idx] : by_host) {
    HostStat hs;
    hs.host = h;
    for (int i : idx) {
      hs.ranks.push_back(s.ranks[i].rank);
      hs.busy = std::max(hs.busy, s.ranks[i].busy_med);
    }
    hb.push_back(hs.busy);
    s.hosts.push_back(hs);
  }
  const double med_host = median(hb);
  s.host_busy_skew = skew(hb, med_host);
  for (auto& h : s.hosts) h.dist = med_host > 0 ? (h.busy - med_host) / med_host : 0;
  std::vector<int> ho(s.hosts.size());
  for (size_t i = 0; i < ho.size(); ++i) ho[i] = int(i);
  std::stable_sort(ho.begin(), ho.end(),
                   [&](int a, int b) { return s.hosts[a].busy > s.hosts[b].busy; });
  for (size_t i = 0; i < ho.size() && i < 8; ++i) s.slowest_hosts.push_back(ho[i]);

  // Out of line: |share - median| above max(tolerance, 4 robust sigmas).
  auto flag = [&](const std::vector<double>& v, const char* what) {
    const double m = median(v), sig = 1.4826 * mad(v);
    const double lim = std::max(opt.share_tol, 4.0 * sig);
    for (size_t i = 0; i < v.size(); ++i)
      if (std::fabs(v[i] - m) > lim) s.out_of_line.push_back({s.ranks[i].rank, what, v[i], m});
  };
  for (StepPart p : kAllStepParts) flag(shares[ix(p)], step_part_name(p));
  waited_for(run, ranks, window, s);
}

}  // namespace st::analysis
