// Implementation of span_log.hpp: a mutex-guarded list.
#include "core/span_log.hpp"

#include <time.h>

#include <atomic>
#include <mutex>

namespace st::spans {
namespace {
std::atomic<TraceLevel> g_level{TraceLevel::kOff};
std::mutex g_mu;
std::vector<Span> g_spans;
}  // namespace

void set_level(TraceLevel l) { g_level = l; }
TraceLevel level() { return g_level.load(std::memory_order_relaxed); }

void add(Span s) {
  if (!on()) return;
  std::lock_guard<std::mutex> lk(g_mu);
  g_spans.push_back(std::move(s));
}

std::vector<Span> take() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<Span> out;
  out.swap(g_spans);
  return out;
}

double epoch_now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace st::spans
