// The NCCL communicator factory of a build without CUDA/NCCL: it says so at
// the point of use (see nccl_communicator.hpp).
#include "comm/nccl_communicator.hpp"
#include "core/error.hpp"

namespace st {
bool nccl_built() { return false; }

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(MpiCommunicator&,
                                                           const std::string& name, double) {
  throw Error("NCCL communicator '" + name +
              "' requested, but scaletrain was built without CUDA/NCCL "
              "(configure with -DSCALETRAIN_CUDA=ON on a machine with the CUDA toolkit and NCCL)");
}
}  // namespace st
