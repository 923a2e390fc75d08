// The CUDA backend's Ops (kernels/ops.hpp) over the CUDA device: cuBLASLt
// GEMM, cuDNN causal attention, and the custom kernels of ops_cuda.hpp
// (cuda_ops.cpp says which op runs where and which dtypes each takes).
#pragma once
#include <memory>

#include "kernels/cuda/device.hpp"
#include "kernels/ops.hpp"

namespace st::cuda {
// deterministic_bwd (runtime.attention_backward=deterministic): causal
// attention's backward runs on the block kernels (bitwise repeatable)
// instead of cuDNN's (dQ accumulated with atomics).
std::unique_ptr<Ops> make_cuda_ops(CudaDevice& dev, bool deterministic_bwd = false);
}  // namespace st::cuda
