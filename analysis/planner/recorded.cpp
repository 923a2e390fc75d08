// Implementation of recorded.hpp.
#include "planner/recorded.hpp"

#include <exception>
#include <map>
#include <string>

#include "parallel/stages.hpp"
#include "record/step.hpp"

namespace st::plan {

void record_shown(std::vector<Candidate>& cands, int top, int near) {
  std::map<std::string, std::pair<double, int>> done;  // layout name -> peak, stage
  int shown_fit = 0, shown_over = 0;
  for (Candidate& c : cands) {
    if (!c.timed) continue;
    if (c.feasible ? shown_fit++ >= top : shown_over++ >= near) continue;
    const std::string key = c.name() + " x" + std::to_string(c.devices);
    auto it = done.find(key);
    if (it == done.end()) {
      const auto& p = c.cfg.parallel;
      const MeshDims d{p.pp, p.dp, p.cp, p.tp};
      double peak = 0;
      int stage = 0;
      try {
        for (int s = 0; s < p.pp; ++s) {
          const record::RankStep r =
              record::record_step(c.cfg, mesh_rank(MeshCoords{s, 0, 0, 0}, d));
          if (double(r.step.peak_total) > peak) peak = double(r.step.peak_total), stage = s;
        }
      } catch (const std::exception& e) {
        c.recorded_error = e.what();
        continue;
      }
      it = done.emplace(key, std::make_pair(peak, stage)).first;
    }
    c.recorded_peak = it->second.first;
    c.recorded_stage = it->second.second;
  }
}

}  // namespace st::plan
