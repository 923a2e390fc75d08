// The shape half of CudaBackend::supports(): what of a schema-valid config
// the CUDA kernels cannot launch (launch_limits.hpp), per rank, refused at
// start-up and by --dry-run with the keys that set the shape. Compiled
// without nvcc and tested on CPUs (label cuda-host).
#pragma once
#include <string>

#include "config/config.hpp"

namespace st::cuda_host {
// "" or the reason, naming the keys: attention per rank has n_heads / tp
// query heads, max(1, n_kv_heads / tp) key heads and seq_len / cp tokens
// (ring attention's blocks), micro_batch sequences.
std::string supports_shapes(const Config& cfg);
}  // namespace st::cuda_host
