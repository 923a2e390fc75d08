// core/cpu_quota.hpp: the smallest CPU quota on a process's cgroup path, on
// cgroup v1 (cpu controller, maybe co-mounted) and v2 trees built in a
// temporary folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/cpu_quota.hpp"

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

}  // namespace
