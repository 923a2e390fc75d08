// The one steady-state window and statistic (see metrics.hpp): the trainer's
// summary line and scaletrain-analyze's reports both call steady_state(), so
// one run cannot print two throughputs.
#include <algorithm>
#include <cmath>

#include "metrics/metrics.hpp"

namespace st::metrics {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = 0.5 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

SteadyState steady_state(const std::vector<double>& step_s, int64_t warmup) {
  SteadyState s;
  const size_t n = step_s.size();
  if (n == 0) return s;
  s.warmup = std::clamp<int64_t>(warmup, 0, int64_t(n) - 1);
  const size_t after = n - size_t(s.warmup);
  s.first = size_t(s.warmup) + after / 2;
  s.end = n;
  s.step_s = median(std::vector<double>(step_s.begin() + std::ptrdiff_t(s.first), step_s.end()));
  return s;
}

std::string steady_state_rule(int64_t warmup) {
  return "back half of the steps after " + std::to_string(warmup) + " warm-up step(s)";
}

}  // namespace st::metrics
