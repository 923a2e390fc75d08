// Implementation of host_memory.hpp.
#include "host_memory.hpp"

#include <fstream>
#include <sstream>
#include <vector>

#include "core/util.hpp"
#include "parallel/mesh.hpp"

namespace st {

plan::MemoryEstimate rank_memory(const Config& cfg, int rank) {
  const auto& p = cfg.parallel;
  return plan::estimate_memory(cfg, mesh_coords(rank, MeshDims{p.pp, p.dp, p.cp, p.tp}).pp);
}

namespace {
int64_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

// cgroup v2: the job's own group (Slurm's task/cgroup puts the job there).
int64_t cgroup_available() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return -1;
  const std::string dir = "/sys/fs/cgroup" + path;
  std::ifstream mx(dir + "/memory.max"), cur(dir + "/memory.current");
  std::string max_s;
  int64_t used = 0;
  if (!(mx >> max_s) || max_s == "max" || !(cur >> used)) return -1;
  try {
    return std::stoll(max_s) - used;
  } catch (const std::exception&) {
    return -1;
  }
}
}  // namespace

int64_t host_memory_available() {
  const int64_t a = meminfo_available(), b = cgroup_available();
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

std::string check_host_memory(const Config& cfg, const Runtime& rt) {
  if (cfg.runtime.device != "cpu") return "";
  const int64_t avail = host_memory_available();
  if (avail < 0) return "";
  // The estimate depends only on the rank's pipeline stage: one per stage,
  // not one per rank of the host (hundreds of ranks each estimating all).
  const auto& p = cfg.parallel;
  std::vector<double> stage_total(size_t(p.pp), -1.0);
  double need_host = 0;
  int ranks_here = 0;
  for (const auto& [host, ranks] : rt.hosts())
    if (host == rt.host())
      for (int r : ranks) {
        const int st = mesh_coords(r, MeshDims{p.pp, p.dp, p.cp, p.tp}).pp;
        double& t = stage_total[size_t(st)];
        if (t < 0) t = plan::estimate_memory(cfg, st).peak.total();
        need_host += t;
        ++ranks_here;
      }
  if (need_host <= double(avail)) return "";
  const plan::MemParts m = rank_memory(cfg, rt.rank()).peak;
  std::ostringstream os;
  os.precision(4);
  os << "not enough memory for this model: rank " << rt.rank() << " needs about "
     << int64_t(m.total()) << " bytes (" << human_bytes(m.total()) << ": params "
     << human_bytes(m.weights) << ", grads " << human_bytes(m.grads) << ", optimizer "
     << human_bytes(m.optim) << ", activations " << human_bytes(m.activations)
     << ", buffers " << human_bytes(m.buffers) << "; the --dry-run estimate), the " << ranks_here << " rank(s) on host " << rt.host()
     << " about " << int64_t(need_host) << " bytes (" << human_bytes(need_host) << "), but "
     << avail << " bytes (" << human_bytes(double(avail))
     << ") are available there. Use a smaller model (model.*), more ranks or nodes with "
        "parallel.zero_stage, parallel.tp or parallel.pp, or train.act_ckpt=full; "
        "scaletrain --dry-run prints the estimate per rank";
  return os.str();
}

}  // namespace st
