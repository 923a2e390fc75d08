// How the CUDA backend counts NCCL's own device memory, as host arithmetic
// compiled without nvcc (label cuda-host). NCCL has no call that reports
// its memory, and from 2.22 it connects lazily (NCCL_RUNTIME_CONNECT,
// default 1: rings, trees and their buffers made at the first collective
// that needs them). So the backend makes its communicators eagerly (it sets
// NCCL_RUNTIME_CONNECT=0 unless the user set it) and counts the device
// memory that disappeared while it made them, less what its own block cache
// took in that time. What this cannot see is documented in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace st::cuda_host {

struct ConnectMode {
  bool set_env = false;  // set NCCL_RUNTIME_CONNECT=0 before the first NCCL call
  bool eager = false;    // NCCL connects rings and trees at creation
  std::string note;      // what the count covers, for the log
};

// From the value of NCCL_RUNTIME_CONNECT in the environment (null: unset).
// Unset or empty: set it to 0 (eager). "0": eager. Any other value: the
// user asked for runtime connection; respected, and the count then covers
// only what creation allocated.
ConnectMode connect_mode(const char* env_value);

// NCCL's device bytes from cudaMemGetInfo's free bytes before and after the
// communicators were made, less the bytes the block cache reserved in that
// interval; 0 when negative (another process freed memory meanwhile).
int64_t nccl_creation_bytes(size_t free_before, size_t free_after, int64_t cache_before,
                            int64_t cache_after);
}  // namespace st::cuda_host
