// The host's share of CPUs, in one place: how many cores a node has, how
// many a rank is bound to, a cgroup CPU quota over the node's ranks, and how
// many ranks and threads share them. The runtime reads it from the machine
// (Runtime::host_share); a CPU cluster file of the planner holds the node
// it models in the same type (Cluster::host: cores_per_node,
// threads_per_rank, cpu_quota; calibrate writes the host it ran on). What
// follows from it is decided here and nowhere else: the threads a rank
// runs, whether its ranks outnumber its CPUs, and so how a rank waits for a
// peer (pace_waits, which the communicators' poll loop asks). Containers
// and emulated nodes cap a group of ranks with a quota below the cores the
// affinity mask shows: a rank that spins while it waits then burns the
// quota its peers on the node need.
#pragma once

#include <string>
#include <vector>

#include "core/poll_wait.hpp"

namespace st {

struct CpuQuota {
  double cpus = 0;      // 0: no quota anywhere on the path
  double period = 0.1;  // seconds the quota is granted per (cpu.max's second field;
                        // the kernel's default period, where none is set)
  std::string where;    // the file that set it
};

// proc_cgroup: the text of /proc/self/cgroup; root: where the cgroup file
// systems are mounted (/sys/fs/cgroup). The smallest quota set on the path
// from the process's cgroup to the root (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us), and the file it was read from.
// Pure but for the files it reads.
CpuQuota cgroup_cpu_quota(const std::string& proc_cgroup, const std::string& root);
// This process's, read from /proc/self/cgroup under /sys/fs/cgroup.
CpuQuota cgroup_cpu_quota();

struct HostShare {
  int cores = 0;        // CPUs the node's ranks may run on together: the union of their
                        // affinity masks (a job's cpuset), else the machine's online
                        // CPUs (0: not stated, in a cluster file)
  int bound = 0;        // CPUs this rank's affinity mask allows (0: not bound, all of them)
  CpuQuota quota;       // a cgroup quota over the node's ranks (cpus 0: none)
  int local_ranks = 1;  // ranks of the job on this node
  int threads = 1;      // compute threads of each rank

  // CPU time per second the node's ranks may use together: its cores,
  // capped by the quota.
  double cpus() const;
  // What one rank may use: its share of cpus(), and no more than it is
  // bound to.
  double rank_cpus() const;
  // A rank's threads above rank_cpus(): its ranks take turns on the CPUs,
  // and a waiting rank must sleep between polls instead of spinning.
  bool oversubscribed() const;
  // Threads for each rank when none are asked: the whole CPUs of its share
  // of the node (cores capped by the quota; not its own mask, as mpirun
  // binds a rank to a core or two by default), at least one.
  // Threads beyond a quota only take turns in it.
  int default_threads() const;
  // One line for the log: "2 rank(s) x 1 thread(s) on 0.45 CPU(s) (quota ...)".
  std::string describe() const;
};

// The whole CPUs each of `local_ranks` ranks gets of `cpus`, at least one.
int threads_per_rank(double cpus, int local_ranks);

// This machine, for `local_ranks` ranks of a job on it, each running
// `requested` threads (0: default_threads()); node_cpus: union_cpus of the
// node's ranks' masks (0: the machine's online CPUs).
HostShare read_host_share(int local_ranks, int requested, int node_cpus = 0);
// This process's affinity mask as '0'/'1' per CPU (CPU 0 first; the
// machine's CPUs, all '1', where the mask is unreadable).
std::string affinity_bits();
// The CPUs in the union of masks (affinity_bits of a node's ranks): what
// they may run on together.
int union_cpus(const std::vector<std::string>& masks);

// /proc/loadavg's text says more threads are runnable than `cpus` (its
// fourth field, "runnable/total"): other work waits for a core. False when
// unreadable.
bool loadavg_busy(const std::string& loadavg, long cpus);

// How this process's waits for peers poll, given the host the runtime
// declared (set_wait_host; until then, a rank alone on its cores): where it
// holds its CPUs, `p` is left as the caller's spinning policy; where its
// ranks outnumber them, or the machine is busy with more runnable threads
// than CPUs right now (read at most every 50 ms), after the first
// millisecond a wait sleeps 5% of the wait so far, at most 5 ms. Hundreds
// of oversubscribed ranks polling every few microseconds swamp the
// scheduler and take the cores from the ranks they wait for; on a machine
// shared with other jobs a spinning rank does the same to its peers
// (measured: ZeRO 3 at dp 2 spent ~16% of its CPU in sched_yield and the
// kernel under load 17 on 2 cores). Sleeping also delays the polls that
// move a large message's fragments, so it is only for shared CPUs. Under a
// quota it matters most: on the emulated cluster at 0.45 CPU per node a
// 2-node dp step took 4.2 s spinning, 2.8 s when its waits slept.
void pace_waits(PollPolicy& p);
void set_wait_host(const HostShare& h);
// Whether waits sleep (the declared host, or the machine busy now).
bool waits_sleep();

}  // namespace st
