// The NCCL argument plans of kernels/cuda/host/nccl_plan.hpp against the MPI
// communicator (labels cuda-host, mpi): every rank of a real MPI job runs a
// collective through MpiCommunicator (the seam's reference semantics), then
// executes the NCCL plans of all ranks of the group in-process with NCCL's
// documented semantics (inputs are a pure function of the rank, so each
// rank can rebuild every other's) and compares its own part. Uneven counts
// (the ZeRO partition), zero counts, in-place all-gather, and exchanges with
// several messages per peer (matched in order) are covered; a plan whose
// ranks disagree on a grouped call (root, count) fails here instead of
// hanging a GPU job.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <memory>
#include <numeric>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "kernels/cuda/host/nccl_plan.hpp"
#include "tensor/device.hpp"

namespace {
using namespace st::cuda_host;

struct Group {
  std::unique_ptr<st::MpiCommunicator> comm;
  int rank = 0, size = 1;
  Group() {
    MPI_Comm d;
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    comm = std::make_unique<st::MpiCommunicator>(d, "nccl-plan", 60.0);
    comm->bind(st::cpu_device());
    rank = comm->rank();
    size = comm->size();
  }
  st::Stream& cs() { return st::cpu_device().compute_stream(); }
};

// Rank r's input: element i is a function of (r, i, salt), exact in fp32.
std::vector<float> input(int r, int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float((r + 1) * 1000 + i * 3 + salt);
  return v;
}

// One virtual rank for the NCCL simulation.
struct VRank {
  std::vector<float> send, recv;
  float* send_base = nullptr;  // the send buffer (in place: inside recv)
  float* at(Buf b, int64_t off) {
    return b == Buf::None ? nullptr : (b == Buf::Send ? send_base : recv.data()) + off;
  }
};

// Executes the plans of every rank with NCCL's semantics: rank-collective
// calls are matched by their position in each rank's plan, and must agree.
void run_collective(std::vector<VRank>& v, const std::vector<NcclPlan>& plans) {
  const size_t P = v.size();
  for (size_t r = 1; r < P; ++r) ASSERT_EQ(plans[r].steps.size(), plans[0].steps.size());
  for (size_t j = 0; j < plans[0].steps.size(); ++j) {
    const NcclStep& s0 = plans[0].steps[j];
    for (size_t r = 1; r < P; ++r) {
      const NcclStep& s = plans[r].steps[j];
      ASSERT_EQ(int(s.call), int(s0.call)) << "step " << j;
      ASSERT_EQ(s.count, s0.count) << "step " << j;
      ASSERT_EQ(s.peer, s0.peer) << "step " << j << ": ranks disagree on the root";
    }
    const int64_t n = s0.count;
    const int root = s0.peer;
    std::vector<std::vector<float>> in(P);  // inputs read before anything is written
    for (size_t r = 0; r < P; ++r) {
      const NcclStep& s = plans[r].steps[j];
      const int64_t len = s0.call == NcclCall::ReduceScatter ? n * int64_t(P) : n;
      const float* src = v[r].at(s.src, s.src_off);
      if (s0.call == NcclCall::Broadcast && int(r) != root) continue;  // sendbuff ignored
      ASSERT_NE(src, nullptr);
      in[r].assign(src, src + len);
    }
    for (size_t r = 0; r < P; ++r) {
      const NcclStep& s = plans[r].steps[j];
      float* dst = v[r].at(s.dst, s.dst_off);
      switch (s0.call) {
        case NcclCall::ReduceScatter:
          for (int64_t i = 0; i < n; ++i) {
            float acc = 0;
            for (size_t k = 0; k < P; ++k) acc += in[k][size_t(int64_t(r) * n + i)];
            dst[i] = acc;
          }
          break;
        case NcclCall::AllGather:
          for (size_t k = 0; k < P; ++k)
            for (int64_t i = 0; i < n; ++i) dst[int64_t(k) * n + i] = in[k][size_t(i)];
          break;
        case NcclCall::Reduce:
          if (int(r) != root) break;  // recvbuff only on the root
          ASSERT_NE(dst, nullptr);
          for (int64_t i = 0; i < n; ++i) {
            float acc = 0;
            for (size_t k = 0; k < P; ++k) acc += in[k][size_t(i)];
            dst[i] = acc;
          }
          break;
        case NcclCall::Broadcast:
          for (int64_t i = 0; i < n; ++i) dst[i] = in[size_t(root)][size_t(i)];
          break;
        default:
          FAIL() << "unexpected call in a collective plan";
      }
    }
  }
}

std::vector<std::vector<int64_t>> count_cases(int P) {
  std::vector<int64_t> even(size_t(P), 6), uneven, zeros(size_t(P), 5);
  for (int r = 0; r < P; ++r) uneven.push_back(3 + 2 * r);
  zeros[size_t(P - 1)] = 0;
  return {even, uneven, zeros};
}

TEST(NcclPlan, ReduceScatterMatchesTheMpiCommunicator) {
  Group g;
  for (const auto& counts : count_cases(g.size)) {
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    auto send = input(g.rank, total, 1);
    std::vector<float> want(size_t(counts[size_t(g.rank)]) + 1, -7.f);
    g.comm->reduce_scatter(send.data(), want.data(), counts, st::DType::F32, g.cs()).wait(g.cs());
    std::vector<VRank> v(size_t(g.size));
    std::vector<NcclPlan> plans;
    for (int r = 0; r < g.size; ++r) {
      v[size_t(r)].send = input(r, total, 1);
      v[size_t(r)].send_base = v[size_t(r)].send.data();
      v[size_t(r)].recv.assign(size_t(counts[size_t(r)]) + 1, -7.f);
      plans.push_back(plan_reduce_scatter(counts, r));
    }
    run_collective(v, plans);
    EXPECT_EQ(v[size_t(g.rank)].recv, want) << "counts[0]=" << counts[0];
  }
}

TEST(NcclPlan, AllGatherMatchesTheMpiCommunicatorInAndOutOfPlace) {
  Group g;
  for (bool in_place : {false, true})
    for (const auto& counts : count_cases(g.size)) {
      std::vector<int64_t> displ(size_t(g.size), 0);
      for (int r = 1; r < g.size; ++r)
        displ[size_t(r)] = displ[size_t(r - 1)] + counts[size_t(r - 1)];
      const int64_t total = displ.back() + counts.back();
      auto mine = input(g.rank, counts[size_t(g.rank)], 2);
      std::vector<float> want(size_t(total), -7.f);
      const float* send = mine.data();
      if (in_place) {
        std::copy(mine.begin(), mine.end(), want.begin() + displ[size_t(g.rank)]);
        send = want.data() + displ[size_t(g.rank)];
      }
      g.comm->all_gather(send, want.data(), counts, st::DType::F32, g.cs()).wait(g.cs());
      std::vector<VRank> v(size_t(g.size));
      std::vector<NcclPlan> plans;
      for (int r = 0; r < g.size; ++r) {
        VRank& x = v[size_t(r)];
        x.recv.assign(size_t(total), -7.f);
        x.send = input(r, counts[size_t(r)], 2);
        x.send_base = x.send.data();
        if (in_place) {
          std::copy(x.send.begin(), x.send.end(), x.recv.begin() + displ[size_t(r)]);
          x.send_base = x.recv.data() + displ[size_t(r)];
        }
        plans.push_back(plan_all_gather(counts, r, in_place));
      }
      run_collective(v, plans);
      EXPECT_EQ(v[size_t(g.rank)].recv, want) << "in_place=" << in_place;
    }
}

TEST(NcclPlan, ExchangeMatchesSendsToReceivesInOrderPerPeer) {
  Group g;
  const int P = g.size;
  // Rank r sends two messages (sizes 4 and 2+r) to r+1 and receives two from
  // r-1, plus an empty message each way; the k-th receive gets the k-th send.
  auto ops_of = [&](int r) {
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    return std::vector<P2PArgs>{{true, 4, next},     {false, 4, prev}, {true, 0, next},
                                {true, 2 + r, next}, {false, 0, prev}, {false, 2 + prev, prev}};
  };
  std::vector<std::vector<float>> bufs;
  std::vector<st::P2POp> ops;
  const auto mine = ops_of(g.rank);
  for (size_t i = 0; i < mine.size(); ++i)
    bufs.push_back(mine[i].send ? input(g.rank, mine[i].n, int(i))
                                : std::vector<float>(size_t(mine[i].n), -7.f));
  for (size_t i = 0; i < mine.size(); ++i)
    ops.push_back({mine[i].send, bufs[i].data(), mine[i].n, mine[i].peer});
  g.comm->exchange(ops, st::DType::F32, g.cs()).wait(g.cs());
  // NCCL: per (sender, receiver) pair, sends and receives pair up in plan order.
  std::map<std::pair<int, int>, std::vector<std::vector<float>>> wire;
  for (int r = 0; r < P; ++r) {
    const auto a = ops_of(r);
    const NcclPlan p = plan_exchange(a, P);
    EXPECT_TRUE(p.grouped);
    for (const NcclStep& s : p.steps)
      if (s.call == NcclCall::Send) wire[{r, s.peer}].push_back(input(r, s.count, s.op));
  }
  const NcclPlan p = plan_exchange(mine, P);
  EXPECT_EQ(p.steps.size(), 4u);  // the empty messages are dropped
  std::map<int, size_t> taken;
  for (const NcclStep& s : p.steps) {
    if (s.call != NcclCall::Recv) continue;
    const auto& msg = wire[{s.peer, g.rank}].at(taken[s.peer]++);
    ASSERT_EQ(int64_t(msg.size()), s.count);
    EXPECT_EQ(msg, bufs[size_t(s.op)]) << "receive " << s.op;
  }
}

TEST(NcclPlan, OneRankIsACopyAndBadPeersAreRefused) {
  const auto rs = plan_reduce_scatter({5}, 0);
  ASSERT_EQ(rs.steps.size(), 1u);
  EXPECT_EQ(int(rs.steps[0].call), int(NcclCall::Copy));
  EXPECT_TRUE(plan_all_gather({5}, 0, true).steps.empty());
  EXPECT_TRUE(plan_reduce_scatter({0, 0}, 1).steps.empty());
  EXPECT_THROW(plan_exchange({{true, 3, 2}}, 2), st::Error);
}
}  // namespace
