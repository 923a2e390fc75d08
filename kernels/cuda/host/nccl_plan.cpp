// The NCCL calls of each collective (see nccl_plan.hpp).
#include "kernels/cuda/host/nccl_plan.hpp"

#include "core/error.hpp"

namespace st::cuda_host {
namespace {
bool all_equal(const std::vector<int64_t>& c) {
  for (int64_t x : c)
    if (x != c[0]) return false;
  return true;
}
}  // namespace

NcclPlan plan_reduce_scatter(const std::vector<int64_t>& counts, int rank) {
  const int size = int(counts.size());
  ST_CHECK(size > 0 && rank >= 0 && rank < size, "reduce_scatter plan: rank ", rank, " of ", size);
  NcclPlan p;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (size == 1) {
    if (counts[0]) p.steps.push_back({NcclCall::Copy, Buf::Send, 0, Buf::Recv, 0, counts[0]});
    return p;
  }
  if (total == 0) return p;
  if (all_equal(counts)) {
    p.steps.push_back({NcclCall::ReduceScatter, Buf::Send, 0, Buf::Recv, 0, counts[0]});
    return p;
  }
  p.grouped = true;
  int64_t off = 0;
  for (int r = 0; r < size; ++r) {
    if (counts[size_t(r)] > 0)
      p.steps.push_back({NcclCall::Reduce, Buf::Send, off, r == rank ? Buf::Recv : Buf::None, 0,
                         counts[size_t(r)], r});
    off += counts[size_t(r)];
  }
  return p;
}

NcclPlan plan_all_gather(const std::vector<int64_t>& counts, int rank, bool send_is_my_part) {
  const int size = int(counts.size());
  ST_CHECK(size > 0 && rank >= 0 && rank < size, "all_gather plan: rank ", rank, " of ", size);
  std::vector<int64_t> displ;
  int64_t total = 0;
  for (int64_t c : counts) displ.push_back(total), total += c;
  NcclPlan p;
  if (size == 1) {
    if (!send_is_my_part && counts[0])
      p.steps.push_back({NcclCall::Copy, Buf::Send, 0, Buf::Recv, 0, counts[0]});
    return p;
  }
  if (total == 0) return p;
  if (all_equal(counts)) {
    p.steps.push_back({NcclCall::AllGather, Buf::Send, 0, Buf::Recv, 0, counts[0]});
    return p;
  }
  p.grouped = true;
  for (int r = 0; r < size; ++r) {
    if (counts[size_t(r)] == 0) continue;
    const bool root = r == rank;
    p.steps.push_back({NcclCall::Broadcast, root ? Buf::Send : Buf::Recv,
                       root ? 0 : displ[size_t(r)], Buf::Recv, displ[size_t(r)], counts[size_t(r)],
                       r});
  }
  return p;
}

NcclPlan plan_exchange(const std::vector<P2PArgs>& ops, int size) {
  NcclPlan p;
  int64_t total = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    ST_CHECK(ops[i].peer >= 0 && ops[i].peer < size, "exchange: peer ", ops[i].peer,
             " outside the group of ", size);
    ST_CHECK(ops[i].n >= 0, "exchange: ", ops[i].n, " elements");
    total += ops[i].n;
  }
  if (size == 1 || total == 0) return p;  // one rank: nccl_communicator.cpp copies
  p.grouped = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].n == 0) continue;
    p.steps.push_back({ops[i].send ? NcclCall::Send : NcclCall::Recv, Buf::Send, 0, Buf::Recv, 0,
                       ops[i].n, ops[i].peer, int(i)});
  }
  return p;
}
}  // namespace st::cuda_host
