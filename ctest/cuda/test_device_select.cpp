// Device selection by PCI bus id across a node's ranks (label cuda-host):
// the pure plan of kernels/cuda/host/device_select.hpp, including the case
// that made NCCL throw on a one-GPU machine (two ranks, one visible GPU).
#include <gtest/gtest.h>

#include "kernels/cuda/host/device_select.hpp"

namespace {
using st::cuda_host::plan_devices;
using Vis = std::vector<std::vector<std::string>>;

const std::string A = "0000:1B:00.0", B = "0000:1c:00.0", C = "0000:9a:00.0", D = "0000:9b:00.0";

TEST(DeviceSelect, EveryRankSeesTheNodeTakesItsLocalRank) {
  const auto p = plan_devices(Vis{{A, B, C, D}, {A, B, C, D}, {A, B, C, D}});
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.ordinal, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.bus_id[0], "0000:1b:00.0");  // lower case
  EXPECT_EQ(p.bus_id[2], "0000:9a:00.0");
}

TEST(DeviceSelect, OneGpuBoundPerRankTakesOrdinalZero) {
  // srun --gpus-per-task=1: each rank sees a different single GPU.
  const auto p = plan_devices(Vis{{C}, {A}, {D}, {B}});
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.ordinal, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(p.bus_id[1], "0000:1b:00.0");
}

TEST(DeviceSelect, TwoRanksOnOneGpuAreRefusedNamingIt) {
  // The one-GPU check machine: both ranks see the same single GPU.
  const auto p = plan_devices(Vis{{A}, {A}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("GPU 0000:1b:00.0 would be shared by node-local ranks 0, 1"),
            std::string::npos)
      << p.error;
  // The same verdict whichever rank asks: the plan is of the whole node.
  EXPECT_EQ(plan_devices(Vis{{A}, {A}}).error, p.error);
}

TEST(DeviceSelect, SameGpuThroughDifferentVisibleSetsIsRefused) {
  // Rank 0 is bound to B alone, rank 1 sees A,B and takes its second: B twice
  // (bus ids differ only in case).
  const auto p = plan_devices(Vis{{"0000:1C:00.0"}, {A, B}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("GPU 0000:1c:00.0 would be shared by node-local ranks 0, 1"),
            std::string::npos)
      << p.error;
}

TEST(DeviceSelect, MoreRanksThanGpusIsRefused) {
  const auto p = plan_devices(Vis{{A, B}, {A, B}, {A, B}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("3 ranks on this node but rank(s) 2 see only 2 GPU(s)"), std::string::npos)
      << p.error;
  EXPECT_EQ(p.ordinal[2], -1);
}

TEST(DeviceSelect, RanksWithoutGpuAreNamed) {
  const auto p = plan_devices(Vis{{A}, {}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("node-local rank(s) 1 see no CUDA device"), std::string::npos) << p.error;
}

TEST(DeviceSelect, NormalizesBusIds) {
  EXPECT_EQ(st::cuda_host::normalize_bus_id("  0000:AB:00.0\n"), "0000:ab:00.0");
}
}  // namespace
