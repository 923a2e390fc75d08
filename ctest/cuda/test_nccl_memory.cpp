// NCCL's device memory, host half (kernels/cuda/host/nccl_memory.hpp;
// label cuda-host): which NCCL_RUNTIME_CONNECT the backend runs with and
// what its count then covers, and the arithmetic that turns cudaMemGetInfo
// readings around communicator creation into NCCL's bytes.
#include <gtest/gtest.h>

#include "kernels/cuda/host/nccl_memory.hpp"

namespace {
using st::cuda_host::connect_mode;
using st::cuda_host::nccl_creation_bytes;

TEST(NcclMemory, ConnectModeFromTheEnvironment) {
  const auto unset = connect_mode(nullptr);
  EXPECT_TRUE(unset.set_env);
  EXPECT_TRUE(unset.eager);
  EXPECT_NE(unset.note.find("set by scaletrain"), std::string::npos);
  const auto empty = connect_mode("");
  EXPECT_TRUE(empty.set_env);
  const auto zero = connect_mode("0");
  EXPECT_FALSE(zero.set_env);
  EXPECT_TRUE(zero.eager);
  const auto one = connect_mode("1");  // the user's choice stands
  EXPECT_FALSE(one.set_env);
  EXPECT_FALSE(one.eager);
  EXPECT_NE(one.note.find("not counted"), std::string::npos);
  EXPECT_FALSE(connect_mode("yes").eager);
}

TEST(NcclMemory, CreationBytesLessTheCachesGrowth) {
  const size_t GiB = size_t(1) << 30, MiB = size_t(1) << 20;
  // 600 MiB gone, none of it ours: NCCL's.
  EXPECT_EQ(nccl_creation_bytes(80 * GiB, 80 * GiB - 600 * MiB, 0, 0), int64_t(600 * MiB));
  // 600 MiB gone, 512 MiB of it the block cache's: 88 MiB NCCL's.
  EXPECT_EQ(
      nccl_creation_bytes(80 * GiB, 80 * GiB - 600 * MiB, int64_t(GiB), int64_t(GiB + 512 * MiB)),
      int64_t(88 * MiB));
  // More free afterwards (another process freed memory): nothing claimed.
  EXPECT_EQ(nccl_creation_bytes(10 * GiB, 11 * GiB, 0, 0), 0);
  // Beyond 32 bits.
  EXPECT_EQ(nccl_creation_bytes(141 * GiB, 136 * GiB, 0, 0), int64_t(5 * GiB));
}
}  // namespace
