// The CPU quota of this process's cgroup, in CPUs: the smallest quota set on
// the path from its cgroup to the root (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us), and the file it was read from; 0
// CPUs when none is set. Containers and emulated nodes cap a whole group of
// ranks this way, below the cores the affinity mask shows: a rank that spins
// while it waits then burns the quota its peers on the node need.
#pragma once

#include <string>
#include <utility>

namespace st {

struct CpuQuota {
  double cpus = 0;    // 0: no quota anywhere on the path
  double period = 0;  // seconds the quota is granted per (cpu.max's second field)
  std::string where;  // the file that set it
};

// proc_cgroup: the text of /proc/self/cgroup; root: where the cgroup file
// systems are mounted (/sys/fs/cgroup). Pure but for the files it reads.
CpuQuota cgroup_cpu_quota(const std::string& proc_cgroup, const std::string& root);
// This process's, read from /proc/self/cgroup under /sys/fs/cgroup.
CpuQuota cgroup_cpu_quota();

// Threads for each of `local_ranks` ranks sharing `cpus` CPUs of a node (its
// cores, or less under a quota): the whole CPUs each rank's share holds, at
// least one. Threads beyond the quota only take turns in it (and a start-up
// peak measured with them is a burst no step sustains).
int threads_per_rank(double cpus, int local_ranks);

}  // namespace st
