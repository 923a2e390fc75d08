// One collective script through two implementations of the Communicator
// seam: MPI on real ranks and the planner's recording communicator (the
// same rank of a group of the same size). Both issue only; the front
// (lib/comm/communicator.hpp) checks, counts and records, so the bytes, the
// statistics and the flight-recorder entries must agree call for call:
// every kind (all-reduce, reduce-scatter, all-gather in and out of place,
// broadcast, exchange, send/recv, a host reduction), uneven counts (one rank's
// part empty), empty sends of every kind (no call) and a group of one (local
// copies, no call). Label mpi.
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "record/record.hpp"
#include "runtime/flight_recorder.hpp"
#include "tensor/device.hpp"

using namespace st;

namespace {

constexpr CollKind kKinds[] = {CollKind::AllReduce, CollKind::ReduceScatter, CollKind::AllGather,
                               CollKind::Broadcast, CollKind::SendRecv};

// The script. `dev` supplies the buffers' stream; buffers are real host
// memory for MPI and unread by the recorder.
void script(Communicator& g, Stream& s, std::vector<float>& a, std::vector<float>& b) {
  const int P = g.size(), r = g.rank();
  std::vector<CommHandle> hs;
  // all_reduce: some elements, then none (no call).
  hs.push_back(g.all_reduce(a.data(), 10, DType::F32, ReduceOp::Sum, s));
  hs.push_back(g.all_reduce(a.data(), 0, DType::F32, ReduceOp::Max, s));
  hs.back().wait();
  hs.front().wait();
  // reduce_scatter with uneven counts, then all zero (no call).
  std::vector<int64_t> uneven(static_cast<size_t>(P)), zeros(static_cast<size_t>(P), 0);
  for (int q = 0; q < P; ++q) uneven[size_t(q)] = 3 + 2 * q;
  const int64_t total = std::accumulate(uneven.begin(), uneven.end(), int64_t(0));
  int64_t before = 0;
  for (int q = 0; q < r; ++q) before += uneven[size_t(q)];
  g.reduce_scatter(a.data(), b.data(), uneven, DType::F32, s).wait();
  g.reduce_scatter(a.data(), b.data(), zeros, DType::F32, s).wait();
  // all_gather out of place and in place, uneven.
  g.all_gather(a.data(), b.data(), uneven, DType::F32, s).wait();
  g.all_gather(b.data() + before, b.data(), uneven, DType::F32, s).wait();
  EXPECT_LE(total, int64_t(b.size()));
  // Nothing to gather (no call), and a part of none for the first rank.
  g.all_gather(a.data(), b.data(), zeros, DType::F32, s).wait();
  std::vector<int64_t> first_none = uneven;
  first_none[0] = 0;
  g.reduce_scatter(a.data(), b.data(), first_none, DType::F32, s).wait();
  // broadcast from the last rank, then an empty one (no call).
  g.broadcast(a.data(), 7, DType::BF16, P - 1, s).wait();
  g.broadcast(a.data(), 0, DType::F32, 0, s).wait();
  // A ring shift (in a group of one: a local copy), then an empty one.
  g.exchange({{true, a.data(), 4, (r + 1) % P}, {false, b.data(), 4, (r + P - 1) % P}}, DType::F32,
             s)
      .wait();
  g.exchange({{true, a.data(), 0, (r + 1) % P}, {false, b.data(), 0, (r + P - 1) % P}}, DType::F32,
             s)
      .wait();
  // send / recv between ranks 0 and 1 (a pipeline hand-off).
  if (P > 1 && r == 0) g.send(a.data(), 5, DType::F32, 1, s).wait();
  if (P > 1 && r == 1) g.recv(b.data(), 5, DType::F32, 0, s).wait();
  // A host reduction (the loss, the norm): counted as an all-reduce.
  double h[3] = {1, 2, 3};
  dynamic_cast<HostGroup&>(g).all_reduce_sum(h, 3);
}

struct Seen {
  std::vector<CollStats> stats;
  std::vector<flight::EntryView> entries;
};

Seen seen(Communicator& g) {
  Seen s;
  for (CollKind k : kKinds) s.stats.push_back(g.stats(k));
  if (g.flight_ring()) s.entries = flight::entries(*g.flight_ring());
  return s;
}

void expect_same(const Seen& mpi, const Seen& rec, const std::string& what) {
  for (size_t k = 0; k < mpi.stats.size(); ++k) {
    SCOPED_TRACE(what + ": " + coll_name(kKinds[k]));
    EXPECT_EQ(mpi.stats[k].calls, rec.stats[k].calls);
    EXPECT_EQ(mpi.stats[k].bytes, rec.stats[k].bytes);
  }
  ASSERT_EQ(mpi.entries.size(), rec.entries.size()) << what;
  for (size_t i = 0; i < mpi.entries.size(); ++i) {
    SCOPED_TRACE(what + ": flight entry " + std::to_string(i));
    EXPECT_EQ(mpi.entries[i].seq, rec.entries[i].seq);
    EXPECT_EQ(mpi.entries[i].op, rec.entries[i].op);
    EXPECT_EQ(mpi.entries[i].bytes, rec.entries[i].bytes);
    EXPECT_EQ(mpi.entries[i].state, "done");
    EXPECT_EQ(rec.entries[i].state, "done");
  }
}

class CommFront : public ::testing::Test {
 protected:
  void SetUp() override {
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    flight::configure("", me, "test", 64);  // rings on, nothing written
  }
};

TEST_F(CommFront, MpiAndTheRecorderCountAndRecordTheSameScript) {
  int P = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  ASSERT_GE(P, 2);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MpiCommunicator mpi(dup, "script", 60);
  record::Recording rec;
  rec.set_flight(true);
  record::RecordDevice rdev(rec);
  record::RecordCommunicator recd(rec, "script", me, P);
  std::vector<float> a(256, 1.0f), b(256, 0.0f);
  script(mpi, cpu_device().compute_stream(), a, b);
  script(recd, rdev.compute_stream(), a, b);
  const Seen m = seen(mpi), r = seen(recd);
  expect_same(m, r, "group of " + std::to_string(P));
  EXPECT_EQ(m.entries.size(), me < 2 ? 9u : 8u);  // every call that moved something
  // What the script moves: 8 calls of the 13, by kind.
  EXPECT_EQ(m.stats[0].calls, 2);  // the device all_reduce and the host one
  EXPECT_EQ(m.stats[0].bytes, 10 * 4 + 3 * 8);
  EXPECT_EQ(m.stats[1].calls, 2);  // uneven, then with a part of none
  int64_t uneven_total = 0;
  for (int q = 0; q < P; ++q) uneven_total += 3 + 2 * q;
  EXPECT_EQ(m.stats[1].bytes, (2 * uneven_total - 3) * 4);
  EXPECT_EQ(m.stats[2].calls, 2);
  EXPECT_EQ(m.stats[3].bytes, 7 * 2);
  EXPECT_EQ(m.stats[4].calls, me < 2 ? 2 : 1);
  EXPECT_EQ(m.stats[4].bytes, 8 * 4 + (me < 2 ? 5 * 4 : 0));
  // The recorder's timeline has the same collectives (empty sends made none).
  EXPECT_EQ(
      int64_t(rec.collectives().size()),
      m.stats[0].calls + m.stats[1].calls + m.stats[2].calls + m.stats[3].calls + m.stats[4].calls);
  // Only the host reduction (the last call) is marked as one: the planner
  // classes collectives by that flag, not by a stream's name.
  ASSERT_FALSE(rec.collectives().empty());
  for (size_t i = 0; i + 1 < rec.collectives().size(); ++i)
    EXPECT_FALSE(rec.collectives()[i].host) << "collective " << i;
  EXPECT_TRUE(rec.collectives().back().host);
  EXPECT_EQ(rec.collectives().back().kind, CollKind::AllReduce);
  EXPECT_EQ(a[0], float(P));  // the all_reduce ran (and 1.0 in bf16 is exact)
}

TEST_F(CommFront, AGroupOfOneCopiesLocallyAndMakesNoCall) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm self;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  MpiCommunicator mpi(self, "one", 60);
  record::Recording rec;
  rec.set_flight(true);
  record::RecordDevice rdev(rec);
  record::RecordCommunicator recd(rec, "one", 0, 1);
  std::vector<float> a(256), b(256, 0.0f);
  std::iota(a.begin(), a.end(), 1.0f);
  script(mpi, cpu_device().compute_stream(), a, b);
  script(recd, rdev.compute_stream(), a, b);
  const Seen m = seen(mpi), r = seen(recd);
  expect_same(m, r, "group of one");
  for (const CollStats& s : m.stats) EXPECT_EQ(s.calls, 0);
  EXPECT_TRUE(m.entries.empty());
  EXPECT_TRUE(rec.collectives().empty());
  // The exchange with itself copied: b[0..4) = a[0..4) (after the gathers).
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b[size_t(i)], a[size_t(i)]);
  // The recorder saw the copies the MPI side made: out-of-place
  // reduce-scatter and all-gather, and the exchange.
  EXPECT_EQ(rec.copies().size(), 3u);
  (void)me;
}

// Strings of every length (empty, under a word, several words) gathered in
// rank order by host all-gathers through the front: counted as all-gathers
// and closed in the flight recorder like any other collective; a group of
// one gets its own string back without a call.
TEST_F(CommFront, HostAllGatherOfStringsKeepsRankOrderAndLengths) {
  int P = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MpiCommunicator mpi(dup, "strings", 60);
  auto text = [](int r) { return std::string(size_t(r * 3), char('a' + r)); };  // rank 0: ""
  const std::vector<std::string> all = all_gather_strings(mpi, text(me));
  ASSERT_EQ(int(all.size()), P);
  for (int r = 0; r < P; ++r) EXPECT_EQ(all[size_t(r)], text(r)) << "rank " << r;
  EXPECT_EQ(mpi.stats(CollKind::AllGather).calls, 2);
  for (const auto& e : seen(mpi).entries) EXPECT_EQ(e.state, "done");
  MPI_Comm self;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  MpiCommunicator one(self, "one", 60);
  EXPECT_EQ(all_gather_strings(one, "alone"), std::vector<std::string>{"alone"});
  EXPECT_EQ(one.stats(CollKind::AllGather).calls, 0);
}

TEST_F(CommFront, BadArgumentsAreRefusedBeforeAnyCall) {
  int P = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  record::Recording rec;
  record::RecordDevice rdev(rec);
  record::RecordCommunicator g(rec, "bad", me, P);
  Stream& s = rdev.compute_stream();
  float x[8];
  EXPECT_THROW(g.reduce_scatter(x, x, std::vector<int64_t>(size_t(P) + 1, 1), DType::F32, s),
               Error);
  EXPECT_THROW(g.all_gather(x, x, std::vector<int64_t>(size_t(P), -1), DType::F32, s), Error);
  EXPECT_THROW(g.exchange({{true, x, 1, P}}, DType::F32, s), Error);
  EXPECT_THROW(g.broadcast(x, 1, DType::F32, -1, s), Error);
  EXPECT_THROW(g.all_reduce(x, -1, DType::F32, ReduceOp::Sum, s), Error);
  EXPECT_TRUE(rec.collectives().empty());
  EXPECT_EQ(g.stats(CollKind::AllReduce).calls, 0);
}

}  // namespace
