// The Communicator contract (lib/comm/communicator.hpp) as a table: every
// collective the model and the engine use, at sizes 0, 1, odd and large, in
// every dtype it is used with, in place where the contract allows it, on the
// backend named by SCALETRAIN_TEST_BACKEND (cpu and cpu-strict: MPI on the
// default and the strict CPU device; cuda: NCCL, label gpu, exit 77 where no
// GPU is visible), under mpiexec with 2 and 4 ranks (and 3 on the default CPU
// device: an odd ring). Values are small
// integers, so every sum is exact in bf16 too and the checks are equalities.
// A collective some rank never joins aborts the job after runtime.timeout_s
// with a message naming the group and the rank (the Timeout case, run in its
// own ctest entry: see CMakeLists.txt).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "tensor/tensor.hpp"

using namespace st;

namespace {
std::string backend_name() {
  const char* b = std::getenv("SCALETRAIN_TEST_BACKEND");
  return b ? b : "cpu";
}

Backend* g_be = nullptr;
std::unique_ptr<MpiCommunicator> g_group;

// Picks the backend on every rank; exits 77 on all of them if it cannot run.
class BackendEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    Config cfg;
    const std::string name = backend_name();
    cfg.runtime.device = name == "cuda" ? "cuda" : "cpu";
    cfg.runtime.strict_device = name == "cpu-strict";
    cfg.train.precision = "bf16";
    std::string why;
    try {
      g_be = &backend_for(cfg);
      int local = 0, nlocal = 1;
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local);
      MPI_Comm_size(node, &nlocal);
      MPI_Comm_free(&node);
      why = g_be->preflight(cfg, local, nlocal);
    } catch (const UsageError& e) {
      why = e.what();
    }
    int bad = why.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
      int r = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &r);
      if (r == 0)
        std::printf("skipped: backend '%s' cannot run here: %s\n", name.c_str(), why.c_str());
      MPI_Finalize();
      std::exit(77);
    }
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    g_group = std::make_unique<MpiCommunicator>(dup, "conformance", 120.0);
    g_be->make_communicators({g_group.get()});
  }
  void TearDown() override { g_group.reset(); }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new BackendEnv);

Communicator& comm() { return g_be->communicator(*g_group); }
Device& dev() { return g_be->device(); }
Stream& cs() { return dev().compute_stream(); }

// Element i of rank r's input: a small integer (sums over 4 ranks stay <= 256).
double val(int r, int64_t i) { return double((r + 1) * (i % 16 + 1)); }

// A device buffer of n elements of dtype t holding f(i), and its host copy back.
Tensor make(int64_t n, DType t, const std::function<double(int64_t)>& f) {
  Tensor x({std::max<int64_t>(n, 1)}, t, MemCat::Other, dev());
  std::vector<char> h(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    const double v = f(i);
    if (t == DType::F32) reinterpret_cast<float*>(h.data())[i] = float(v);
    if (t == DType::F64) reinterpret_cast<double*>(h.data())[i] = v;
    if (t == DType::BF16) reinterpret_cast<uint16_t*>(h.data())[i] = f32_to_bf16(float(v));
  }
  dev().copy_from_host(x.raw(), h.data(), h.size(), cs());
  return x;
}
std::vector<double> read(const Tensor& x, int64_t n) {
  const DType t = x.dtype();
  std::vector<char> h(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(t));
  dev().copy_to_host(h.data(), x.raw(), h.size(), cs());
  cs().synchronize();
  std::vector<double> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::F32) r[static_cast<size_t>(i)] = reinterpret_cast<float*>(h.data())[i];
    if (t == DType::F64) r[static_cast<size_t>(i)] = reinterpret_cast<double*>(h.data())[i];
    if (t == DType::BF16)
      r[static_cast<size_t>(i)] = bf16_to_f32(reinterpret_cast<uint16_t*>(h.data())[i]);
  }
  return r;
}

const std::vector<int64_t> kSizes = {0, 1, 1001, (int64_t(1) << 20) + 3};

// Rank r's share of n elements in an uneven split (the ZeRO partition's
// counts are uneven): rank r gets n/P + (r < n % P), the last one a bit less.
std::vector<int64_t> uneven(int P, int64_t n) {
  std::vector<int64_t> c(static_cast<size_t>(P), n / P);
  for (int r = 0; r < int(n % P); ++r) ++c[static_cast<size_t>(r)];
  if (P > 1 && c[0] > 0) --c[0], ++c[static_cast<size_t>(P - 1)];
  return c;
}

TEST(Comm, AllReduceSumAndMax) {
  const int P = comm().size(), me = comm().rank();
  for (DType t : {DType::F32, DType::BF16, DType::F64})
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Tensor x = make(n, t, [&](int64_t i) { return val(me, i); });
        comm().all_reduce(x.raw(), n, t, op, cs()).wait(cs());
        const auto got = read(x, n);
        for (int64_t i = 0; i < n; ++i) {
          double want = 0;
          for (int r = 0; r < P; ++r)
            want = op == ReduceOp::Sum ? want + val(r, i) : std::max(want, val(r, i));
          ASSERT_EQ(got[static_cast<size_t>(i)], want) << dtype_name(t) << " n " << n << " i " << i;
        }
      }
}

TEST(Comm, ReduceScatterEqualAndUnevenCounts) {
  const int P = comm().size(), me = comm().rank();
  for (DType t : {DType::F32, DType::BF16})
    for (int64_t n : kSizes)
      for (bool even : {true, false}) {
        const std::vector<int64_t> counts = even ? equal_counts(P, n / P) : uneven(P, n);
        const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
        int64_t off = 0;
        for (int r = 0; r < me; ++r) off += counts[static_cast<size_t>(r)];
        Tensor send = make(total, t, [&](int64_t i) { return val(me, i); });
        Tensor recv = make(counts[static_cast<size_t>(me)], t, [](int64_t) { return -7.0; });
        comm().reduce_scatter(send.raw(), recv.raw(), counts, t, cs()).wait(cs());
        const auto got = read(recv, counts[static_cast<size_t>(me)]);
        for (int64_t i = 0; i < counts[static_cast<size_t>(me)]; ++i) {
          double want = 0;
          for (int r = 0; r < P; ++r) want += val(r, off + i);
          ASSERT_EQ(got[static_cast<size_t>(i)], want)
              << dtype_name(t) << " n " << n << " even " << even;
        }
      }
}

TEST(Comm, AllGatherEqualUnevenAndInPlace) {
  const int P = comm().size(), me = comm().rank();
  for (DType t : {DType::F32, DType::BF16})
    for (int64_t n : kSizes)
      for (bool even : {true, false})
        for (bool in_place : {false, true}) {
          const std::vector<int64_t> counts = even ? equal_counts(P, n / P) : uneven(P, n);
          const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
          int64_t off = 0;
          for (int r = 0; r < me; ++r) off += counts[static_cast<size_t>(r)];
          // Rank r owns elements [off_r, off_r + counts[r]) with value 1000 + i
          // (bf16: the index mod 200, exact).
          auto owned = [](int64_t i) { return double(i % 200); };
          Tensor recv = make(total, t, [&](int64_t i) {
            return in_place && i >= off && i < off + counts[static_cast<size_t>(me)] ? owned(i)
                                                                                     : -3.0;
          });
          Tensor mine =
              make(counts[static_cast<size_t>(me)], t, [&](int64_t i) { return owned(off + i); });
          const void* send =
              in_place ? static_cast<char*>(recv.raw()) + static_cast<size_t>(off) * dtype_size(t)
                       : mine.raw();
          comm().all_gather(send, recv.raw(), counts, t, cs()).wait(cs());
          const auto got = read(recv, total);
          for (int64_t i = 0; i < total; ++i)
            ASSERT_EQ(got[static_cast<size_t>(i)], owned(i))
                << dtype_name(t) << " n " << n << " even " << even << " in place " << in_place;
        }
}

// A ring shift (what ring attention and the pipeline hand-offs do): each
// rank sends to the next and receives from the previous in one exchange,
// several times in a row on the same communicator (in order, untagged).
TEST(Comm, ExchangeRingShiftsInOrder) {
  const int P = comm().size(), me = comm().rank();
  for (DType t : {DType::F32, DType::BF16})
    for (int64_t n : kSizes) {
      std::vector<Tensor> out, in;
      std::vector<CommHandle> hs;
      for (int k = 0; k < 3; ++k) {
        out.push_back(make(n, t, [&](int64_t i) { return val(me, i) + k; }));
        in.push_back(make(n, t, [](int64_t) { return -1.0; }));
        hs.push_back(comm().exchange({{true, out.back().raw(), n, (me + 1) % P},
                                      {false, in.back().raw(), n, (me + P - 1) % P}},
                                     t, cs()));
      }
      for (auto& h : hs) h.wait(cs());
      for (int k = 0; k < 3; ++k) {
        const auto got = read(in[static_cast<size_t>(k)], n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(got[static_cast<size_t>(i)], val((me + P - 1) % P, i) + k)
              << dtype_name(t) << " k " << k;
      }
    }
}

// Large collectives in flight together on one communicator, as gradient
// buckets are (MPI's ring, lib/comm/mpi_communicator.cpp: each its own
// message tag, its rounds posted as the polls find the previous ones done),
// waited for in the reverse order of issue: each gets its own sums.
TEST(Comm, LargeCollectivesInFlightTogether) {
  const int P = comm().size(), me = comm().rank();
  // 4 MiB in fp32: every kind a ring on 3 and 4 ranks (all-gathers from
  // chunks of 1 MiB), the reduce-scatter's bf16 too.
  const int64_t n = (int64_t(1) << 20) + 5;
  const std::vector<int64_t> counts = uneven(P, n);
  int64_t off = 0;
  for (int r = 0; r < me; ++r) off += counts[static_cast<size_t>(r)];
  std::vector<Tensor> ar;
  std::vector<CommHandle> hs;
  for (int k = 0; k < 3; ++k) {
    ar.push_back(make(n, DType::F32, [&](int64_t i) { return val(me, i) + k; }));
    hs.push_back(comm().all_reduce(ar.back().raw(), n, DType::F32, ReduceOp::Sum, cs()));
  }
  Tensor send = make(n, DType::BF16, [&](int64_t i) { return val(me, i); });
  Tensor shard = make(counts[static_cast<size_t>(me)], DType::BF16, [](int64_t) { return -7.0; });
  hs.push_back(comm().reduce_scatter(send.raw(), shard.raw(), counts, DType::BF16, cs()));
  Tensor whole = make(n, DType::F32, [](int64_t) { return -3.0; });
  Tensor mine = make(counts[static_cast<size_t>(me)], DType::F32,
                     [&](int64_t i) { return double((off + i) % 200); });
  hs.push_back(comm().all_gather(mine.raw(), whole.raw(), counts, DType::F32, cs()));
  for (size_t k = hs.size(); k-- > 0;) hs[k].wait(cs());
  for (int k = 0; k < 3; ++k) {
    const auto got = read(ar[static_cast<size_t>(k)], n);
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < P; ++r) want += val(r, i) + k;
      ASSERT_EQ(got[static_cast<size_t>(i)], want) << "all-reduce " << k << " i " << i;
    }
  }
  const auto part = read(shard, counts[static_cast<size_t>(me)]);
  for (int64_t i = 0; i < counts[static_cast<size_t>(me)]; ++i) {
    double want = 0;
    for (int r = 0; r < P; ++r) want += val(r, off + i);
    ASSERT_EQ(part[static_cast<size_t>(i)], want) << "reduce-scatter i " << i;
  }
  const auto all = read(whole, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(all[static_cast<size_t>(i)], double(i % 200)) << "all-gather i " << i;
}

// Handles: test() eventually reports completion without a wait, seconds()
// is known afterwards, and a stream that waited on a handle sees the result.
TEST(Comm, HandlesCompleteAndOrderTheStream) {
  const int P = comm().size(), me = comm().rank();
  const int64_t n = 4096;
  Tensor x = make(n, DType::F32, [&](int64_t i) { return val(me, i); });
  CommHandle h = comm().all_reduce(x.raw(), n, DType::F32, ReduceOp::Sum, cs());
  int spins = 0;
  while (!h.test()) ASSERT_LT(++spins, 100000000);
  EXPECT_GE(h.seconds(), 0.0);
  // The compute stream scales the result after waiting for it.
  Tensor y = make(n, DType::F32, [&](int64_t i) { return val(me, i); });
  CommHandle h2 = comm().all_reduce(y.raw(), n, DType::F32, ReduceOp::Sum, cs());
  h2.wait(cs());
  g_be->ops().scale(cs(), y.data(), n, 0.5f);
  const auto got = read(y, n);
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < P; ++r) want += val(r, i);
    ASSERT_EQ(got[static_cast<size_t>(i)], 0.5 * want);
  }
}

// Run alone (its own ctest entry): rank 1 never joins, so every other rank
// must abort after the timeout with a message naming the group and rank.
TEST(CommTimeout, AbsentPeerAbortsWithAMessage) {
  if (std::getenv("SCALETRAIN_TEST_TIMEOUT") == nullptr) GTEST_SKIP() << "run by its own test";
  g_group->set_timeout(2.0);
  comm().set_timeout(2.0);
  if (comm().rank() == 1) {
    std::fflush(stdout);
    ::sleep(30);
    return;
  }
  Tensor x = make(16, DType::F32, [](int64_t) { return 1.0; });
  comm().all_reduce(x.raw(), 16, DType::F32, ReduceOp::Sum, cs()).wait();
  FAIL() << "the collective returned without its peer";
}
}  // namespace
