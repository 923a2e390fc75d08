#include "core/host.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/util.hpp"

namespace st {
namespace fs = std::filesystem;

CpuQuota cgroup_cpu_quota(const std::string& proc_cgroup, const std::string& root) {
  CpuQuota best;
  auto consider = [&](double quota, double period, const fs::path& file) {
    const double cpus = quota / period;
    if (cpus > 0 && (best.cpus == 0 || cpus < best.cpus))
      best = {cpus, period * 1e-6, file.string()};
  };
  std::istringstream lines(proc_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "ID:controllers:path"; v2's unified hierarchy is "0::path".
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctl = line.substr(a + 1, b - a - 1);
    const bool v2 = line.substr(0, a) == "0" && ctl.empty();
    bool v1 = false;
    std::istringstream names(ctl);
    for (std::string c; std::getline(names, c, ',');) v1 = v1 || c == "cpu";
    if (!v1 && !v2) continue;
    const fs::path base = v2 ? fs::path(root) : fs::path(root) / ctl;
    for (fs::path path = line.substr(b + 1);; path = path.parent_path()) {
      const fs::path d = base / path.relative_path();
      if (v2) {
        std::ifstream m(d / "cpu.max");
        std::string q;
        double period = 0;
        if (m >> q >> period && q != "max" && period > 0)
          consider(std::stod(q), period, d / "cpu.max");
      } else {
        std::ifstream q(d / "cpu.cfs_quota_us"), p(d / "cpu.cfs_period_us");
        double quota = 0, period = 0;
        if (q >> quota && p >> period && quota > 0 && period > 0)
          consider(quota, period, d / "cpu.cfs_quota_us");
      }
      if (path.empty() || path == path.root_path()) break;
    }
  }
  return best;
}

int threads_per_rank(double cpus, int local_ranks) {
  const double share = cpus / std::max(1, local_ranks);
  return std::max(1, int(std::floor(share + 1e-9)));
}

CpuQuota cgroup_cpu_quota() {
  std::ifstream f("/proc/self/cgroup");
  std::stringstream text;
  text << f.rdbuf();
  return cgroup_cpu_quota(text.str(), "/sys/fs/cgroup");
}

double HostShare::cpus() const {
  const double c = std::max(1, cores);
  return quota.cpus > 0 ? std::min(c, quota.cpus) : c;
}

double HostShare::rank_cpus() const {
  const double share = cpus() / std::max(1, local_ranks);
  return bound > 0 ? std::min(double(bound), share) : share;
}

bool HostShare::oversubscribed() const { return std::max(1, threads) > rank_cpus() + 1e-9; }

int HostShare::default_threads() const { return threads_per_rank(cpus(), local_ranks); }

std::string HostShare::describe() const {
  std::ostringstream o;
  o << local_ranks << " rank(s) x " << threads << " thread(s) on " << cpus() << " CPU(s)";
  if (quota.cpus > 0) o << " (quota " << quota.cpus << " CPU, " << quota.where << ")";
  if (bound > 0) o << ", " << bound << " bound to each rank";
  return o.str();
}

std::string affinity_bits() {
  const int n = std::max(1, int(std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return std::string(size_t(n), '1');
  std::string bits;
  for (int c = 0; c < std::min(n, CPU_SETSIZE); ++c) bits += CPU_ISSET(c, &set) ? '1' : '0';
  return bits;
}

int union_cpus(const std::vector<std::string>& masks) {
  std::string all;
  for (const std::string& m : masks) {
    if (all.size() < m.size()) all.resize(m.size(), '0');
    for (size_t c = 0; c < m.size(); ++c)
      if (m[c] == '1') all[c] = '1';
  }
  return int(std::count(all.begin(), all.end(), '1'));
}

HostShare read_host_share(int local_ranks, int requested, int node_cpus) {
  HostShare h;
  h.cores = node_cpus > 0 ? node_cpus : std::max(1, int(std::thread::hardware_concurrency()));
  const int mask = union_cpus({affinity_bits()});
  h.bound = mask < h.cores ? mask : 0;
  h.quota = cgroup_cpu_quota();
  h.local_ranks = std::max(1, local_ranks);
  h.threads = requested > 0 ? requested : h.default_threads();
  return h;
}

bool loadavg_busy(const std::string& loadavg, long cpus) {
  double avg[3];
  int runnable = 0, total = 0;
  const bool ok = std::sscanf(loadavg.c_str(), "%lf %lf %lf %d/%d", &avg[0], &avg[1], &avg[2],
                              &runnable, &total) == 5;
  return ok && cpus > 0 && runnable > cpus;
}

namespace {
std::atomic<bool> g_host_shared{false};

// loadavg_busy of this machine now, read at most every 50 ms.
bool machine_busy() {
  static std::atomic<double> last{-1};
  static std::atomic<bool> busy{false};
  const double now = wall_time();
  if (now - last.load(std::memory_order_relaxed) < 0.05)
    return busy.load(std::memory_order_relaxed);
  last.store(now, std::memory_order_relaxed);
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  std::ifstream f("/proc/loadavg");
  std::string text;
  std::getline(f, text);
  busy.store(loadavg_busy(text, cpus), std::memory_order_relaxed);
  return busy.load(std::memory_order_relaxed);
}
}  // namespace

void set_wait_host(const HostShare& h) { g_host_shared = h.oversubscribed(); }

bool waits_sleep() { return g_host_shared.load(std::memory_order_relaxed) || machine_busy(); }

void pace_waits(PollPolicy& p) {
  if (!waits_sleep()) return;
  p.spins = 0;
  p.spin_s = 1e-3;
  p.sleep_s = 0;
  p.sleep_frac = 0.05;
  p.sleep_max_s = 5e-3;
}

}  // namespace st
