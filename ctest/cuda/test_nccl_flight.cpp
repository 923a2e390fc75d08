// The NCCL communicator's path from issue to the flight recorder, on CPUs
// (label cuda-host): NcclCommunicator issues through the Communicator front
// and tracks its collectives with cuda_host::InFlight
// (kernels/cuda/host/nccl_inflight.hpp); here the same front and the same
// InFlight run with host flags in place of the CUDA start/end events, so a
// GPU hang's dump is shown to list the NCCL collectives: enqueued at issue,
// started once the device starts one, done (and counted) once it ends,
// oldest first, and the watchdog's overdue message names the stuck one.
// What is not run here: the NCCL and CUDA calls themselves (label gpu).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/cuda/host/nccl_inflight.hpp"
#include "runtime/flight_recorder.hpp"
#include "tensor/device.hpp"

using namespace st;

namespace {

// A collective on the "device": its start and end events are flags.
class FlagOp final : public CommOp {
 public:
  FlagOp(Communicator& c, const Collective& k) : CommOp(c, k) {}
  bool test() override { return ended; }
  void wait_stream(Stream&) override {}
  bool device_started() { return begun; }
  bool device_done() { return ended; }
  bool begun = false, ended = false;
  double started_at = 0;
};

// NcclCommunicator's shape: issue() makes the op and hands it to InFlight.
class FlagComm final : public Communicator {
 public:
  explicit FlagComm(int size) : size_(size) { join_flight(std::vector<int>(size_t(size), 0)); }
  int rank() const override { return 0; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  cuda_host::InFlight<FlagOp> pending;
  std::vector<std::shared_ptr<FlagOp>> issued;

 protected:
  std::shared_ptr<CommOp> issue(const Collective& c, Stream*) override {
    auto op = std::make_shared<FlagOp>(*this, c);
    pending.push(op);
    issued.push_back(op);
    return op;
  }
  void copy_local(void*, const void*, size_t, Stream&) override { ++copies; }

 public:
  int copies = 0;

 private:
  int size_;
  std::string name_ = "nccl_dp";
};

std::vector<std::string> states(Communicator& c) {
  std::vector<std::string> s;
  for (const auto& e : flight::entries(*c.flight_ring())) s.push_back(e.op + ":" + e.state);
  return s;
}

TEST(NcclFlight, IssuedCollectivesMoveThroughTheFlightRecorder) {
  flight::configure("", 0, "test", 16);
  FlagComm g(4);
  ASSERT_NE(g.flight_ring(), nullptr);
  Stream& s = cpu_device().compute_stream();
  float buf[64];
  CommHandle ar = g.all_reduce(buf, 16, DType::BF16, ReduceOp::Sum, s);
  CommHandle rs = g.reduce_scatter(buf, buf, {4, 4, 4, 5}, DType::F32, s);
  g.all_reduce(buf, 0, DType::F32, ReduceOp::Sum, s);  // nothing to send: no issue
  ASSERT_EQ(g.issued.size(), 2u);
  EXPECT_EQ(states(g),
            (std::vector<std::string>{"all_reduce:enqueued", "reduce_scatter:enqueued"}));

  g.issued[0]->begun = true;  // the device starts the first
  g.pending.reap(100.0);
  EXPECT_EQ(states(g), (std::vector<std::string>{"all_reduce:started", "reduce_scatter:enqueued"}));
  EXPECT_EQ(g.stats(CollKind::AllReduce).calls, 0);

  // Stuck: the watchdog's message names it once past the timeout.
  EXPECT_EQ(g.pending.overdue(105.0, 10.0), "");
  const std::string why = g.pending.overdue(111.0, 10.0);
  EXPECT_NE(why.find("all_reduce of 32 bytes not finished"), std::string::npos) << why;

  g.issued[0]->ended = true;
  g.issued[1]->begun = g.issued[1]->ended = true;
  g.pending.reap(112.0);
  EXPECT_EQ(states(g), (std::vector<std::string>{"all_reduce:done", "reduce_scatter:done"}));
  EXPECT_EQ(g.stats(CollKind::AllReduce).calls, 1);
  EXPECT_EQ(g.stats(CollKind::AllReduce).bytes, 32);
  EXPECT_EQ(g.stats(CollKind::ReduceScatter).bytes, 17 * 4);
  EXPECT_EQ(g.pending.size(), 0u);
  // A handle seen done after the reaper closed it counts nothing twice.
  EXPECT_TRUE(ar.test());
  rs.wait();
  EXPECT_EQ(g.stats(CollKind::AllReduce).calls, 1);
  EXPECT_EQ(g.stats(CollKind::ReduceScatter).calls, 1);
}

TEST(NcclFlight, AGroupOfOneIssuesNothing) {
  flight::configure("", 0, "test", 16);
  FlagComm one(1);
  Stream& s = cpu_device().compute_stream();
  float a[8], b[8];
  one.all_gather(a, b, {8}, DType::F32, s);                          // out of place: a copy
  one.exchange({{true, a, 8, 0}, {false, b, 8, 0}}, DType::F32, s);  // with itself: a copy
  one.all_reduce(a, 8, DType::F32, ReduceOp::Sum, s);
  EXPECT_TRUE(one.issued.empty());
  EXPECT_EQ(one.copies, 2);
  EXPECT_TRUE(flight::entries(*one.flight_ring()).empty());
}

}  // namespace
