// Builds without the CUDA backend (SCALETRAIN_CUDA=OFF, or nvcc, cuBLASLt,
// cuDNN or NCCL not found at configure time): runtime.device=cuda is refused
// at start-up with the reason, on every rank, before anything runs.
#include "core/error.hpp"
#include "step_engine.hpp"

namespace st {
namespace {
const char* const kNoCuda =
    "runtime.device=cuda: this scaletrain was built without the CUDA backend (configure with "
    "-DSCALETRAIN_CUDA=ON, or the 'cuda' preset, on a machine with the CUDA toolkit, cuDNN and "
    "NCCL); valid in this build: runtime.device=cpu";
}

std::string cuda_engine_preflight(const Config& /*cfg*/, const Runtime& /*rt*/) { return kNoCuda; }

std::unique_ptr<StepEngine> make_cuda_engine(const Config& /*cfg*/, Mesh& /*mesh*/,
                                             MpiCommunicator& /*world*/, const Runtime& /*rt*/) {
  throw UsageError(kNoCuda);
}
}  // namespace st
