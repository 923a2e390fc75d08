// Implementation of quota.hpp: a CPU quota's arithmetic.
#include "plan/quota.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace st::plan {

std::vector<double> quota_cpu_seconds(
    const std::vector<std::vector<std::pair<double, double>>>& busy, const std::vector<int>& ranks,
    double step, const QuotaNode& node) {
  const size_t G = busy.size();
  std::vector<double> got(G, 0.0);
  if (G == 0 || step <= 0 || node.cpus <= 0 || node.period <= 0) return got;
  const double P = node.period;
  // Enough repeats that the periods fall at many phases against the step,
  // and four offsets of the period grid on top.
  const int reps = 1 + std::clamp(int(std::ceil(16 * P / step)), 3, 64);
  constexpr int kPhases = 4;
  struct Ev {
    double t;
    size_t g;
    int d;
  };
  std::vector<Ev> ev;
  for (int k = 0; k < reps; ++k)
    for (size_t g = 0; g < G; ++g)
      for (const auto& [b, e] : busy[g])
        if (e > b) {
          ev.push_back({k * step + b, g, +1});
          ev.push_back({k * step + e, g, -1});
        }
  std::sort(ev.begin(), ev.end(), [](const Ev& x, const Ev& y) {
    return std::tie(x.t, x.d) < std::tie(y.t, y.d);  // an end before a start at one instant
  });
  for (int ph = 0; ph < kPhases; ++ph) {
    const double phase = P * ph / kPhases;
    std::vector<int> on(G, 0);
    int a = 0;
    double t = 0;
    // The budget of the period t is in, and where it ends.
    double left = node.cpus * (phase > 0 ? phase : P);
    double next = phase > 0 ? phase : P;
    for (size_t i = 0; i <= ev.size(); ++i) {
      const double until = i < ev.size() ? ev[i].t : reps * step;
      while (t < until) {
        const double t1 = std::min(until, next);
        if (a > 0 && left > 0) {
          const double want = double(a) * node.threads;
          const double rate = node.cores > 0 ? std::min(want, double(node.cores)) : want;
          const double used = std::min(left, rate * (t1 - t));
          left -= used;
          if (t >= step) {  // past the first repeat
            const double per = used / a / (node.extra ? node.extra(a) : 1.0);
            for (size_t g = 0; g < G; ++g)
              if (on[g] > 0) got[g] += per;
          }
        }
        t = t1;
        if (t >= next) {
          left = node.cpus * P;
          next += P;
        }
      }
      if (i < ev.size()) {
        on[ev[i].g] += ev[i].d;
        a += ev[i].d * ranks[ev[i].g];
      }
    }
  }
  for (double& x : got) x /= double(kPhases) * (reps - 1);
  return got;
}

double quota_share(const QuotaNode& q, int a) {
  double r = std::min(double(q.threads), q.cpus / a);
  if (q.cores > 0) r = std::min(r, double(q.cores) / a);
  return r;
}

QuotaClock quota_clock(const QuotaNode& q, int ranks, double per_price, double tokens) {
  QuotaClock c;
  if (ranks <= 0 || q.cpus <= 0 || q.period <= 0) return c;
  c.ranks = ranks;
  c.cpus = q.cpus;
  c.cap = q.cpus * q.period;
  double each = double(std::max(1, q.threads));  // CPUs of one computing rank
  if (q.cores > 0) each = std::min(each, double(q.cores) / ranks);
  const double extra = q.extra ? q.extra(ranks) : 1.0;
  c.draw = each * ranks;
  c.fast = each / extra;
  c.slow = quota_share(q, ranks) / extra;
  c.per_price = per_price;
  c.tokens = std::clamp(tokens, 0.0, c.cap);
  return c;
}

double QuotaClock::run(double t, double priced) {
  if (ranks <= 0 || priced <= 0) return t + std::max(0.0, priced);
  if (t > last) tokens = std::min(cap, tokens + cpus * (t - last));
  double work = priced * per_price;
  if (draw > cpus && tokens > 0) {
    const double burst = tokens / (draw - cpus);  // seconds until the bucket is empty
    if (work <= fast * burst) {
      const double dt = work / fast;
      tokens -= (draw - cpus) * dt;
      last = t + dt;
      return last;
    }
    work -= fast * burst;
    t += burst;
    tokens = 0;
  }
  last = t + work / (draw > cpus ? slow : fast);
  return last;
}

}  // namespace st::plan
