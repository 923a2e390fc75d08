// Implementation of cpu_peak.hpp.
#include "cpu_peak.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "core/util.hpp"

namespace st {
double measure_sgemm_flops(int n, double seconds) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n, 0.f);
  double best = 0;
  double t_end = wall_time() + seconds;
  int reps = 0;
  do {
    double t0 = wall_time();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
                0.f, c.data(), n);
    double dt = wall_time() - t0;
    if (reps > 0) best = std::max(best, 2.0 * n * double(n) * n / dt);  // first rep warms up
    ++reps;
  } while (wall_time() < t_end || reps < 3);
  return best;
}
}  // namespace st
