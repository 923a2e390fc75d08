// Implementation of nvtx_ranges.hpp.
#include "kernels/cuda/nvtx_ranges.hpp"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "kernels/cuda/cuda_check.hpp"

namespace st::cuda {

void NvtxRanges::push(const char* name) { nvtxRangePushA(name); }

void NvtxRanges::pop() { nvtxRangePop(); }

void NvtxRanges::capture(bool on) {
  if (on)
    ST_CUDA_CHECK(cudaProfilerStart());
  else
    ST_CUDA_CHECK(cudaProfilerStop());
}

}  // namespace st::cuda
