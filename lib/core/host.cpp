#include "core/cpu_quota.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace st
