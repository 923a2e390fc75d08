// Implementation of host_memory.hpp.
#include "host_memory.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/util.hpp"
#include "parallel/mesh.hpp"

namespace st {

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

std::string gib(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", b / double(int64_t(1) << 30));
  return s;
}
}  // namespace

int64_t host_memory_available(std::string* which) {
  const int64_t a = meminfo_available(), b = cgroup_available();
  const bool cg = b >= 0 && (a < 0 || b < a);
  if (which) *which = cg ? "the job's cgroup (memory.max less memory.current)" : "MemAvailable";
  return cg ? b : a;
}

AddressSpace address_space() {
  AddressSpace as;
  rlimit lim{};
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    as.limit = int64_t(lim.rlim_cur);
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmSize:") {
      int64_t kb = 0;
      f >> kb;
      as.used = kb * 1024;
      break;
    }
    std::getline(f, key);
  }
  return as;
}

std::string memory_verdict(const plan::MemParts& m, int rank, const AddressSpace& as,
                           double need_host, int ranks_here, const std::string& host, int64_t avail,
                           const std::string& avail_what) {
  const double need = m.total();
  const bool as_short = as.limit >= 0 && need > double(as.limit - as.used);
  const bool host_short = avail >= 0 && need_host > double(avail);
  if (!as_short && !host_short) return "";
  std::ostringstream os;
  os << "not enough memory for this model: rank " << rank << " needs about " << gib(need)
     << " (params " << human_bytes(m.weights) << ", grads " << human_bytes(m.grads)
     << ", optimizer " << human_bytes(m.optim) << ", activations " << human_bytes(m.activations)
     << ", buffers " << human_bytes(m.buffers) << "; the --dry-run estimate)";
  if (as_short) {
    // The per-process limit decides: a rank cannot map more than it.
    os << ", but its address-space limit (RLIMIT_AS, set by `ulimit -v`) is "
       << gib(double(as.limit)) << " (ulimit -v " << as.limit / 1024 << " KiB), of which "
       << gib(double(as.used)) << " are mapped already (libraries, MPI, threads), leaving "
       << gib(double(std::max<int64_t>(0, as.limit - as.used)))
       << ". Raise the limit (ulimit -v, or the site's limit on address space) to at least "
       << gib(need + double(as.used)) << ", or use";
  } else {
    os << "; the " << ranks_here << " rank(s) on host " << host << " need about " << gib(need_host)
       << " in all, but " << gib(double(avail)) << " are available there (" << avail_what
       << "). Use";
  }
  os << " a smaller model (model.*), more ranks or nodes with parallel.zero_stage, parallel.tp "
        "or parallel.pp, or train.act_ckpt=full; scaletrain --dry-run prints the estimate per "
        "rank";
  return os.str();
}

std::string check_host_memory(const Config& cfg, const Runtime& rt, MpiCommunicator& node,
                              int64_t* share_per_rank) {
  if (share_per_rank) *share_per_rank = -1;
  if (cfg.runtime.device != "cpu") return "";
  // The estimate depends only on the rank's pipeline stage: the host's first
  // rank records each stage present on it once and shares the parts, so
  // hundreds of ranks of one host do not each record the same step.
  const auto& p = cfg.parallel;
  const MeshDims dims{p.pp, p.dp, p.cp, p.tp};
  std::vector<int> ranks_here;
  for (const auto& [host, ranks] : rt.hosts())
    if (host == rt.host()) ranks_here = ranks;
  constexpr int kParts = 6;
  std::vector<double> parts(size_t(p.pp) * kParts, -1.0);
  if (node.rank() == 0) {
    std::vector<bool> here(size_t(p.pp), false);
    for (int r : ranks_here) here[size_t(mesh_coords(r, dims).pp)] = true;
    for (int s = 0; s < p.pp; ++s) {
      if (!here[size_t(s)]) continue;
      const plan::MemParts m = plan::estimate_memory(cfg, s).peak;
      const double v[kParts] = {m.weights, m.grads, m.optim, m.activations, m.buffers, m.workspace};
      std::copy(v, v + kParts, parts.begin() + s * kParts);
    }
  }
  node.broadcast_bytes(parts.data(), int64_t(parts.size() * sizeof(double)), 0);
  auto stage_parts = [&](int s) {
    const double* v = parts.data() + s * kParts;
    return plan::MemParts{v[0], v[1], v[2], v[3], v[4], v[5]};
  };
  double need_host = 0;
  for (int r : ranks_here) need_host += stage_parts(mesh_coords(r, dims).pp).total();
  std::string avail_what;
  const int64_t avail = host_memory_available(&avail_what);
  if (share_per_rank && avail >= 0 && !ranks_here.empty())
    *share_per_rank = avail / int64_t(ranks_here.size());
  return memory_verdict(stage_parts(mesh_coords(rt.rank(), dims).pp), rt.rank(), address_space(),
                        need_host, int(ranks_here.size()), rt.host(), avail, avail_what);
}

}  // namespace st
