// core/host.hpp: the smallest CPU quota on a process's cgroup path, on
// cgroup v1 (cpu controller, maybe co-mounted) and v2 trees built in a
// temporary folder; the host's share of CPUs (threads, oversubscription)
// and how waits pace on it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/host.hpp"

namespace fs = std::filesystem;

namespace {

struct Tree : ::testing::Test {
  fs::path root = fs::temp_directory_path() / ("st-cpu-quota-" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(root); }
  void TearDown() override { fs::remove_all(root); }
  void put(const fs::path& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
};

TEST_F(Tree, V2SmallestAlongThePath) {
  put("cpu.max", "max 100000\n");
  put("emu/cpu.max", "90000 100000\n");       // 0.9
  put("emu/n1/cpu.max", "45000 100000\n");    // 0.45: the node
  put("emu/n1/job/cpu.max", "max 100000\n");  // none below
  const auto q = st::cgroup_cpu_quota("0::/emu/n1/job\n", root.string());
  EXPECT_DOUBLE_EQ(q.cpus, 0.45);
  EXPECT_DOUBLE_EQ(q.period, 0.1);
  EXPECT_EQ(q.where, (root / "emu/n1/cpu.max").string());
}

TEST_F(Tree, V1CpuControllerCoMountedWithCpuacct) {
  put("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  put("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  put("cpu,cpuacct/emu/n2/cpu.cfs_quota_us", "75000\n");
  put("cpu,cpuacct/emu/n2/cpu.cfs_period_us", "50000\n");
  const auto q = st::cgroup_cpu_quota("4:memory:/x\n3:cpu,cpuacct:/emu/n2\n0::/\n", root.string());
  EXPECT_DOUBLE_EQ(q.cpus, 1.5);
  EXPECT_DOUBLE_EQ(q.period, 0.05);
}

// runtime.threads 0: the whole CPUs of each rank's share, at least one. A
// node capped to 0.45 CPU runs one thread a rank (two took turns in the
// quota and the start-up peak read a burst: 235 GFLOP/s for ~53 sustained).
TEST(ThreadsPerRank, WholeCpusOfEachRanksShare) {
  EXPECT_EQ(st::threads_per_rank(2, 1), 2);
  EXPECT_EQ(st::threads_per_rank(2, 2), 1);
  EXPECT_EQ(st::threads_per_rank(2, 4), 1);
  EXPECT_EQ(st::threads_per_rank(0.45, 1), 1);
  EXPECT_EQ(st::threads_per_rank(8, 1), 8);  // a container's 8-CPU limit on a larger host
  EXPECT_EQ(st::threads_per_rank(8.5, 2), 4);
  EXPECT_EQ(st::threads_per_rank(64, 8), 8);
  EXPECT_EQ(st::threads_per_rank(3, 0), 3);
}

TEST_F(Tree, NoQuotaAnywhereIsZero) {
  put("cpu.max", "max 100000\n");
  put("cpu/cpu.cfs_quota_us", "-1\n");
  put("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(st::cgroup_cpu_quota("1:cpu:/\n0::/\n", root.string()).cpus, 0);
  EXPECT_EQ(st::cgroup_cpu_quota("", root.string()).cpus, 0);
  EXPECT_EQ(st::cgroup_cpu_quota("garbage\n", root.string()).cpus, 0);
}

st::HostShare host(int cores, int bound, double quota, int ranks, int threads) {
  st::HostShare h;
  h.cores = cores;
  h.bound = bound;
  h.quota.cpus = quota;
  h.quota.period = 0.1;
  h.quota.where = "cpu.max";
  h.local_ranks = ranks;
  h.threads = threads;
  return h;
}

// A rank's threads against its share of the node: mpirun binding each of 2
// ranks to one of 2 cores is no oversubscription (it was counted as one
// before: the node's ranks x threads against one rank's mask); 4 unbound
// ranks on 2 cores, or one rank under a 0.45-CPU quota, are.
TEST(HostShare, OversubscribedByEachRanksShare) {
  EXPECT_FALSE(host(2, 1, 0, 2, 1).oversubscribed());
  EXPECT_FALSE(host(2, 0, 0, 2, 1).oversubscribed());
  EXPECT_FALSE(host(2, 0, 0, 1, 2).oversubscribed());
  EXPECT_TRUE(host(2, 0, 0, 1, 3).oversubscribed());
  EXPECT_TRUE(host(2, 0, 0, 4, 1).oversubscribed());
  EXPECT_TRUE(host(2, 1, 0, 1, 2).oversubscribed());  // 2 threads on the one core it is bound to
  EXPECT_TRUE(host(2, 0, 0.45, 1, 1).oversubscribed());
  EXPECT_TRUE(host(8, 0, 0, 16, 1).oversubscribed());   // 16 ranks in a job's 8-CPU cpuset
  EXPECT_FALSE(host(64, 0, 8, 8, 1).oversubscribed());  // a container's 8 CPUs, 8 ranks
  EXPECT_TRUE(host(64, 0, 8, 8, 2).oversubscribed());
  EXPECT_DOUBLE_EQ(host(64, 0, 8, 8, 2).cpus(), 8);
  EXPECT_DOUBLE_EQ(host(64, 4, 0, 8, 2).rank_cpus(), 4);
  EXPECT_DOUBLE_EQ(host(64, 16, 0, 8, 2).rank_cpus(), 8);
  EXPECT_EQ(host(2, 0, 0.45, 1, 0).default_threads(), 1);
  EXPECT_EQ(host(64, 1, 8.5, 2, 0).default_threads(), 4);  // not the affinity mask
  const std::string d = host(2, 0, 0.45, 1, 1).describe();
  EXPECT_NE(d.find("0.45 CPU(s)"), std::string::npos) << d;
  EXPECT_NE(d.find("cpu.max"), std::string::npos) << d;
}

// This machine read as it is: at least one core, a mask no wider than the
// machine, the requested threads kept, and the default one's share.
TEST(HostShare, ReadsThisMachine) {
  const st::HostShare h = st::read_host_share(2, 0);
  EXPECT_GE(h.cores, 1);
  EXPECT_GE(h.bound, 0);
  EXPECT_LT(h.bound, h.cores + 1);
  EXPECT_EQ(h.local_ranks, 2);
  EXPECT_EQ(h.threads, h.default_threads());
  EXPECT_EQ(st::read_host_share(0, 3).threads, 3);
  // The node's CPUs as its ranks' masks together give them (Runtime).
  EXPECT_EQ(st::read_host_share(2, 0, 1).cores, 1);
  EXPECT_EQ(st::read_host_share(2, 0, 1).threads, 1);
  EXPECT_EQ(st::read_host_share(0, 3).local_ranks, 1);
}

// Ranks bound to a core each run on their masks' union; a cpuset shared by
// all shows once.
TEST(HostShare, UnionOfMasks) {
  EXPECT_EQ(st::union_cpus({"1000", "0100"}), 2);
  EXPECT_EQ(st::union_cpus({"1100", "1100", "1100"}), 2);
  EXPECT_EQ(st::union_cpus({"10", "0001"}), 2);
  EXPECT_EQ(st::union_cpus({}), 0);
  EXPECT_GE(st::union_cpus({st::affinity_bits()}), 1);
}

TEST(HostShare, LoadavgBusyWhenRunnableExceedCpus) {
  EXPECT_TRUE(st::loadavg_busy("3.10 2.00 1.50 5/812 4242\n", 2));
  EXPECT_FALSE(st::loadavg_busy("3.10 2.00 1.50 2/812 4242\n", 2));
  EXPECT_FALSE(st::loadavg_busy("garbage", 2));
  EXPECT_FALSE(st::loadavg_busy("1 1 1 9/9 1", 0));
}

// Waits sleep where the declared host is oversubscribed, and keep the
// caller's spinning policy where each rank holds its CPUs (unless the
// machine happens to be busy: then both sleep, and the test says so).
TEST(HostShare, WaitsSleepOnlyOnSharedCpus) {
  st::set_wait_host(host(2, 0, 0, 4, 1));
  st::PollPolicy p;
  p.spins = 77;
  st::pace_waits(p);
  EXPECT_EQ(p.spins, 0);
  EXPECT_DOUBLE_EQ(p.sleep_frac, 0.05);
  EXPECT_DOUBLE_EQ(p.sleep_max_s, 5e-3);
  st::set_wait_host(host(2, 1, 0, 2, 1));
  st::PollPolicy q;
  q.spins = 77;
  st::pace_waits(q);
  if (st::waits_sleep())
    GTEST_SKIP() << "this machine has more runnable threads than CPUs now; waits sleep";
  EXPECT_EQ(q.spins, 77);
  EXPECT_DOUBLE_EQ(q.sleep_frac, 0);
}

}  // namespace
