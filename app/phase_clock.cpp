// Implementation of phase_clock.hpp.
#include "phase_clock.hpp"

#include <cstdio>

#include "comm/mpi_communicator.hpp"
#include "core/util.hpp"

namespace st {

PhaseClock& startup_clock() {
  static PhaseClock c(true);
  return c;
}

nlohmann::json summarize_phases(MpiCommunicator& world, const PhaseClock& c) {
  const auto& p = c.phases();
  const size_t n = p.size();
  // [wall..., cpu..., total] maxima; [cpu..., total cpu] sums.
  std::vector<double> mx(2 * n + 1), sum(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    mx[i] = p[i].wall_s;
    mx[n + i] = p[i].cpu_s;
    sum[i] = p[i].cpu_s;
    sum[n] += p[i].cpu_s;
  }
  mx[2 * n] = c.elapsed_s();
  world.all_reduce_max(mx.data(), int64_t(mx.size()));
  world.all_reduce_sum(sum.data(), int64_t(sum.size()));
  const double ranks = double(world.size());
  nlohmann::json phases = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i)
    phases.push_back({{"name", p[i].name},
                      {"wall_s", mx[i]},
                      {"cpu_s_mean", sum[i] / ranks},
                      {"cpu_s_max", mx[n + i]}});
  return {{"phases", phases},
          {"total_s", mx[2 * n]},
          {"cpu_s_mean", sum[n] / ranks},
          {"ranks", world.size()}};
}

std::string format_phases(const nlohmann::json& s) {
  char b[160];
  std::snprintf(b, sizeof b, "%.2f s (CPU %.3f s/rank, %d ranks; slowest rank per phase):",
                s["total_s"].get<double>(), s["cpu_s_mean"].get<double>(), s["ranks"].get<int>());
  std::string out = b;
  for (const auto& p : s["phases"]) {
    std::snprintf(b, sizeof b, " %s %.2f s (CPU %.3f),", p["name"].get<std::string>().c_str(),
                  p["wall_s"].get<double>(), p["cpu_s_mean"].get<double>());
    out += b;
  }
  if (!out.empty() && out.back() == ',') out.pop_back();
  return out;
}

void add_to_run_json(const std::string& path, const std::string& key, const nlohmann::json& v) {
  try {
    nlohmann::json run = nlohmann::json::parse(read_file(path));
    run[key] = v;
    write_file_atomic(path, run.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaletrain: warning: no %s in %s: %s\n", key.c_str(), path.c_str(),
                 e.what());
  }
}

}  // namespace st
