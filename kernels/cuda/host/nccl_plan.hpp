// The NCCL calls each collective of the Communicator seam becomes
// (kernels/cuda/nccl_communicator.cpp issues exactly these), as a pure
// function of the arguments, compiled without nvcc. A CPU test executes the
// plans of every rank with NCCL's documented semantics and compares the
// result with the MPI communicator's on the same inputs (label cuda-host).
//
//  - reduce_scatter: equal counts -> ncclReduceScatter; unequal -> a group
//    of ncclReduce, part r to root r (recvbuff only on the root).
//  - all_gather: equal counts -> ncclAllGather (in place when send is this
//    rank's part of recv); unequal -> a group of ncclBroadcast from each
//    root into its part (the root's sendbuff is its input).
//  - exchange: a group of ncclSend/ncclRecv in the caller's order (NCCL
//    matches them in order per peer: the seam's k-th receive gets the k-th
//    send), zero-sized ones dropped.
//  - a group of one rank: device copies (or nothing), no NCCL call.
#pragma once
#include <cstdint>
#include <vector>

namespace st::cuda_host {

enum class NcclCall { AllReduce, ReduceScatter, AllGather, Reduce, Broadcast, Send, Recv, Copy };

// Buffers are named, offsets in elements: Send = the caller's send buffer
// (or the P2P op's buffer), Recv = its receive buffer, None = nullptr.
enum class Buf { None, Send, Recv };

struct NcclStep {
  NcclCall call;
  Buf src = Buf::None;
  int64_t src_off = 0;
  Buf dst = Buf::None;
  int64_t dst_off = 0;
  int64_t count = 0;  // elements
  int peer = -1;      // root (Reduce, Broadcast) or peer (Send, Recv)
  int op = -1;        // Send/Recv: the index of the P2P op it carries
};

struct NcclPlan {
  bool grouped = false;  // between ncclGroupStart and ncclGroupEnd
  std::vector<NcclStep> steps;
};

NcclPlan plan_reduce_scatter(const std::vector<int64_t>& counts, int rank);
// send_is_my_part: send == recv + the offset of this rank's part (in place).
NcclPlan plan_all_gather(const std::vector<int64_t>& counts, int rank, bool send_is_my_part);

struct P2PArgs {
  bool send;
  int64_t n;
  int peer;
};
NcclPlan plan_exchange(const std::vector<P2PArgs>& ops, int size);
}  // namespace st::cuda_host
