// main() of the gpu-labelled gtest binaries: exit 77 (ctest SKIP_RETURN_CODE)
// with the reason when no CUDA device is visible, so a GPU-less machine
// reports them skipped, never passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/cuda/device.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (st::cuda::device_count(&why) == 0) {
    std::printf("SKIP: %s; this test needs a GPU (label gpu)\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
