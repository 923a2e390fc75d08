// The CUDA backend's profiler sink (core/ranges.hpp): every phase range as
// an NVTX range (NVTX 3, header-only in the CUDA toolkit), and the capture
// window as cudaProfilerStart/Stop, so `nsys profile
// --capture-range=cudaProfilerApi` records exactly runtime.profile_steps
// (docs/cuda.md). Which ranges open, their names and nesting are the host
// logic in core (tested on CPUs); this only forwards them.
#pragma once
#include "core/ranges.hpp"

namespace st::cuda {

class NvtxRanges final : public ranges::Sink {
 public:
  void push(const char* name) override;
  void pop() override;
  void capture(bool on) override;  // cudaProfilerStart / cudaProfilerStop (ST_CUDA_CHECK)
};

}  // namespace st::cuda
