// The MPI-free parts of the Communicator seam (communicator.hpp): collective
// names, nccl-tests' bus-bandwidth factors and equal part counts, shared by
// every implementation (MPI, NCCL, the planner's recording one).
#include "comm/communicator.hpp"

namespace st {

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::AllReduce:
      return "all_reduce";
    case CollKind::ReduceScatter:
      return "reduce_scatter";
    case CollKind::AllGather:
      return "all_gather";
    case CollKind::Broadcast:
      return "broadcast";
    case CollKind::SendRecv:
      return "send_recv";
    default:
      return "?";
  }
}

std::vector<int64_t> equal_counts(int size, int64_t n) {
  return std::vector<int64_t>(size_t(size), n);
}

}  // namespace st
