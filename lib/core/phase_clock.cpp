// Implementation of phase_clock.hpp.
#include "core/phase_clock.hpp"

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "core/util.hpp"

namespace st {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

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

PhaseClock::PhaseClock(bool from_process_start) {
  t_ = wall_time();
  c_ = from_process_start ? 0.0 : process_cpu_seconds();
  if (from_process_start) t_ -= process_age_s();
  t0_ = t_;
}

void PhaseClock::mark(const std::string& name) {
  mark_at(name, wall_time(), process_cpu_seconds());
}

void PhaseClock::mark_at(const std::string& name, double wall, double cpu) {
  phases_.push_back({name, wall - t_, cpu - c_});
  t_ = wall;
  c_ = cpu;
}

double PhaseClock::elapsed_s() const { return wall_time() - t0_; }

}  // namespace st
