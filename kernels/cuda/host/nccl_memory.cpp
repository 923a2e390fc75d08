// NCCL memory accounting rules (see nccl_memory.hpp).
#include "kernels/cuda/host/nccl_memory.hpp"

namespace st::cuda_host {

ConnectMode connect_mode(const char* env_value) {
  const std::string v = env_value ? env_value : "";
  if (v.empty())
    return {true, true,
            "NCCL_RUNTIME_CONNECT=0 (set by scaletrain): rings and trees connected at creation"};
  if (v == "0")
    return {false, true, "NCCL_RUNTIME_CONNECT=0: rings and trees connected at creation"};
  return {false, false,
          "NCCL_RUNTIME_CONNECT=" + v +
              " (runtime connection): only what creation allocated; buffers made at the first "
              "collective are not counted"};
}

int64_t nccl_creation_bytes(size_t free_before, size_t free_after, int64_t cache_before,
                            int64_t cache_after) {
  const int64_t gone = int64_t(free_before) - int64_t(free_after);
  const int64_t ours = cache_after - cache_before;
  return gone - ours > 0 ? gone - ours : 0;
}
}  // namespace st::cuda_host
