// The MPI-free parts of the Communicator seam (communicator.hpp): collective
// names, nccl-tests' bus-bandwidth factors and equal part counts, shared by
// every implementation (MPI, NCCL, the planner's recording one), and the
// check that every rank handed over its groups in one order.
#include "comm/communicator.hpp"

#include <atomic>

#include "core/error.hpp"

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

uint64_t Communicator::next_uid() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

std::vector<int64_t> equal_counts(int size, int64_t n) {
  return std::vector<int64_t>(size_t(size), n);
}

void check_same_entries(const std::vector<Communicator*>& groups) {
  for (size_t k = 0; k < groups.size(); ++k) {
    auto* h = dynamic_cast<HostGroup*>(groups[k]);
    if (!h || h->size() < 2) continue;
    // The entry's index and name, exact in a double (FNV-1a of the name, 20 bits).
    uint32_t hash = 2166136261u;
    for (char ch : h->name()) hash = (hash ^ uint8_t(ch)) * 16777619u;
    const double code = double(k) * 1048576.0 + double(hash & 0xFFFFFu);
    double v[2] = {code, -code};
    h->all_reduce_max(v, 2);
    ST_CHECK(v[0] == code && -v[1] == code, "communicators: entry ", k, " of this rank's list ('",
             h->name(), "') is not entry ", k,
             " of every member's list; every rank must hand over its groups in one order "
             "(Backend::make_communicators)");
  }
}

}  // namespace st
