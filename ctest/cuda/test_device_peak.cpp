// The CUDA backend's MFU peak from what the device reports (label
// cuda-host): an H200 NVL gets its own datasheet row, not the SXM's; other
// devices the lib/metrics row; a device with fewer SMs than its chip (a MIG
// instance) the row scaled by its SM share; an unknown device none.
#include <gtest/gtest.h>

#include "kernels/cuda/host/device_peak.hpp"

using st::cuda_host::gpu_bf16_peak;

TEST(DevicePeak, H200NvlIsNotAnH200Sxm) {
  const auto nvl = gpu_bf16_peak("NVIDIA H200 NVL", 132);
  const auto sxm = gpu_bf16_peak("NVIDIA H200", 132);
  ASSERT_TRUE(nvl && sxm);
  EXPECT_DOUBLE_EQ(nvl->flops, 835.5e12);
  EXPECT_NE(nvl->source.find("H200 NVL"), std::string::npos) << nvl->source;
  EXPECT_DOUBLE_EQ(sxm->flops, 989e12);
  EXPECT_EQ(sxm->source.find("NVL"), std::string::npos) << sxm->source;
  EXPECT_DOUBLE_EQ(gpu_bf16_peak("NVIDIA H100 80GB HBM3", 132)->flops, 989e12);
  EXPECT_DOUBLE_EQ(gpu_bf16_peak("NVIDIA A100-SXM4-80GB", 108)->flops, 312e12);
}

TEST(DevicePeak, FewerSmsThanTheChipScaleThePeak) {
  const auto mig = gpu_bf16_peak("NVIDIA H200 NVL", 66);
  ASSERT_TRUE(mig);
  EXPECT_DOUBLE_EQ(mig->flops, 835.5e12 / 2);
  EXPECT_NE(mig->source.find("scaled to 66 of 132 SMs"), std::string::npos) << mig->source;
  EXPECT_DOUBLE_EQ(gpu_bf16_peak("NVIDIA H200", 0)->flops, 989e12);    // SM count unknown
  EXPECT_DOUBLE_EQ(gpu_bf16_peak("NVIDIA H200", 140)->flops, 989e12);  // never scaled up
}

TEST(DevicePeak, UnknownDevicesHaveNone) {
  EXPECT_FALSE(gpu_bf16_peak("NVIDIA H100 NVL", 132));
  EXPECT_FALSE(gpu_bf16_peak("NVIDIA GeForce RTX 4090", 128));
}
