// Order statistics used by every report: median, percentiles (linear
// interpolation between closest ranks, like numpy's default), MAD.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace st::analysis {

// Out of line: inlined into callers at -O3, GCC 12's -Wfree-nonheap-object
// misreads the sort of the by-value copy as freeing a non-heap pointer.
double percentile(std::vector<double> v, double p);
inline double median(const std::vector<double>& v) { return percentile(v, 50.0); }
inline double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}
inline double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
// Median absolute deviation (unscaled).
inline double mad(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> d;
  d.reserve(v.size());
  for (double x : v) d.push_back(std::fabs(x - m));
  return median(d);
}

}  // namespace st::analysis
