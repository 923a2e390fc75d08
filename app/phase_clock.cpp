// Implementation of phase_clock.hpp.
#include "phase_clock.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "comm/mpi_communicator.hpp"
#include "core/util.hpp"

namespace st {

namespace {
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds since this process started (/proc/self/stat's start time, on the
// boot clock); 0 where it cannot be read.
double process_age_s() {
  std::ifstream f("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  timespec now{};
  if (close == std::string::npos || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22)
      return double(now.tv_sec) + 1e-9 * double(now.tv_nsec) -
             std::stod(field) / double(sysconf(_SC_CLK_TCK));
  return 0;
}
}  // namespace

PhaseClock::PhaseClock(bool from_process_start) {
  t_ = wall_time();
  c_ = from_process_start ? 0.0 : cpu_now();
  if (from_process_start) t_ -= process_age_s();
  t0_ = t_;
}

void PhaseClock::mark(const std::string& name) { mark_at(name, wall_time(), cpu_now()); }

void PhaseClock::mark_at(const std::string& name, double wall, double cpu) {
  phases_.push_back({name, wall - t_, cpu - c_});
  t_ = wall;
  c_ = cpu;
}

double PhaseClock::elapsed_s() const { return wall_time() - t0_; }

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
