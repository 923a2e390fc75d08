// Every device communicator is made at start, in one order (backend.hpp's
// make_communicators), on real MPI ranks: the step engine runs on the CPU
// backend behind a watching Backend that forwards everything and counts
// - the make_communicators calls and what each made, on every rank;
// - the collectives each made communicator carries (a forwarding
//   Communicator counts them);
// - any make_communicators call after construction, and any communicator()
//   lookup of a group not made at start (the CPU backend refuses it too).
// Layouts: pp 2 and pp 2 interleaved (2 ranks), pp 2 x dp 2 x tp 2 (8).
// Two training steps each; nothing may be made during them, and every
// collective must go through a communicator made at start.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"

using namespace st;

namespace {

// Forwards every collective to the communicator made at start, counting it.
class Counting final : public Communicator {
 public:
  explicit Counting(Communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  const std::string& name() const override { return c_.name(); }
  CommHandle all_reduce(void* b, int64_t n, DType t, ReduceOp op, Stream& s) override {
    ++calls;
    return c_.all_reduce(b, n, t, op, s);
  }
  CommHandle reduce_scatter(const void* a, void* b, const std::vector<int64_t>& c, DType t,
                            Stream& s) override {
    ++calls;
    return c_.reduce_scatter(a, b, c, t, s);
  }
  CommHandle all_gather(const void* a, void* b, const std::vector<int64_t>& c, DType t,
                        Stream& s) override {
    ++calls;
    return c_.all_gather(a, b, c, t, s);
  }
  CommHandle exchange(const std::vector<P2POp>& ops, DType t, Stream& s) override {
    ++calls;
    return c_.exchange(ops, t, s);
  }
  void bind(Device& d) override { c_.bind(d); }
  int64_t calls = 0;

 private:
  Communicator& c_;
};

// The CPU backend, watched.
class Watch final : public Backend {
 public:
  std::string name() const override { return "watch"; }
  std::string supports(const Config& c) const override { return be_.supports(c); }
  std::string preflight(const Config& c, int l, int n) override { return be_.preflight(c, l, n); }
  Device& device() override { return be_.device(); }
  Ops& ops() override { return be_.ops(); }
  std::optional<DevicePeak> peak(const Config& c) override { return be_.peak(c); }
  std::vector<Communicator*> make_communicators(const std::vector<Communicator*>& groups) override {
    ++make_calls;
    std::vector<Communicator*> out;
    for (Communicator* c : be_.make_communicators(groups)) {
      made.push_back(std::make_unique<Counting>(*c));
      of[c] = made.back().get();
      out.push_back(made.back().get());
    }
    return out;
  }
  Communicator& communicator(Communicator& g) override {
    ++lookups;
    auto it = of.find(&be_.communicator(g));  // throws for a group not made
    if (it == of.end()) ++misses;
    return it == of.end() ? g : *it->second;
  }
  int make_calls = 0, lookups = 0, misses = 0;
  std::vector<std::unique_ptr<Counting>> made;

 private:
  Backend& be_ = cpu_backend(false);
  std::map<Communicator*, Counting*> of;
};

struct Layout {
  int pp, dp, tp, chunks;
};

// The same list on every rank: its names, joined, are equal everywhere.
bool same_on_every_rank(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == h && hi == h;
}

void run(const Layout& l) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 120);
  Config cfg;  // the default model (configs/models/default.yaml): 8 layers
  cfg.model.seq_len = 32;
  cfg.parallel.pp = l.pp;
  cfg.parallel.dp = l.dp;
  cfg.parallel.tp = l.tp;
  cfg.parallel.num_model_chunks = l.chunks;
  cfg.parallel.zero_stage = 1;
  cfg.train.micro_batch = 1;
  cfg.train.grad_accum = 4;
  Watch be;
  Mesh mesh(world, MeshDims{l.pp, l.dp, 1, l.tp});
  Engine eng(cfg, mesh, be);
  const std::string what = "pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp) +
                           " x tp " + std::to_string(l.tp) + " chunks " + std::to_string(l.chunks) +
                           ", rank " + std::to_string(world.rank());
  // One call at start: dp x cp, tp, cp, then 2 directions x 2 colours of links.
  ASSERT_EQ(be.make_calls, 1) << what;
  std::string names;
  for (auto& c : be.made) names += c->name() + " ";
  EXPECT_EQ(names, "dp_cp tp cp pp_fwd0 pp_fwd1 pp_bwd0 pp_bwd1 ") << what;
  EXPECT_TRUE(same_on_every_rank(names)) << what;

  DataLoader loader(make_synthetic_source(cfg.train.seed, cfg.model.vocab_size), cfg.model.seq_len,
                    cfg.train.micro_batch, cfg.train.grad_accum, l.dp, mesh.coords().dp);
  for (long step = 1; step <= 2; ++step) {
    eng.begin_step();
    const StepOut o = eng.forward_backward(step, loader);
    ASSERT_TRUE(o.finite) << what;
    eng.apply(step, 1e-3, o.grad_norm, false, nullptr);
    be.device().synchronize();
  }
  // Nothing made during the steps, no lookup of a group not made.
  EXPECT_EQ(be.make_calls, 1) << what;
  EXPECT_EQ(be.misses, 0) << what;
  // Every engine communicator is one of those made (its statistics list).
  std::set<Communicator*> made;
  for (auto& c : be.made) made.insert(c.get());
  for (Communicator* c : eng.comms()) {
    if (!dynamic_cast<MpiCommunicator*>(c)) {
      EXPECT_TRUE(made.count(c)) << what << " " << c->name();
    }
  }
  // Which carried traffic: each group of 2+ ranks the layout communicates
  // over (a group of one may be called: its collectives are no-ops). A stage sends activations on
  // its colour's forward link and gradients on its colour's backward link; with 2 stages and one
  // chunk, stage 0 sends forward on colour 0 and stage 1 backward on colour 1 (the other two links
  // stay idle); interleaved chunks wrap from the last stage to the first and use all four.
  std::map<std::string, int64_t> calls;
  for (auto& c : be.made) calls[c->name()] = c->calls;
  const bool s0 = mesh.coords().pp == 0;
  EXPECT_GT(calls["dp_cp"], 0) << what;  // the gradient buckets
  if (l.tp > 1) {
    EXPECT_GT(calls["tp"], 0) << what;
  }
  EXPECT_GT(calls["pp_fwd0"], 0) << what;  // stage 0 sends, stage 1 receives
  EXPECT_GT(calls["pp_bwd1"], 0) << what;
  const bool wrap = l.chunks > 1;
  EXPECT_EQ(calls["pp_fwd1"] > 0, wrap) << what << (s0 ? " stage 0" : " stage 1");
  EXPECT_EQ(calls["pp_bwd0"] > 0, wrap) << what << (s0 ? " stage 0" : " stage 1");
}

TEST(CommAtStart, MadeOnceInOneOrderAndNothingLater) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n == 2) {
    run({2, 1, 1, 1});
    run({2, 1, 1, 2});
  } else {
    ASSERT_EQ(n, 8) << "run with 2 or 8 ranks";
    run({2, 2, 2, 1});
  }
}

// A group not handed over at start is refused, never made on the spot.
TEST(CommAtStart, LookupOfAGroupNotMadeIsRefused) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 120);
  auto late = world.dup("late");
  EXPECT_THROW(cpu_backend(false).communicator(*late), Error);
  EXPECT_EQ(cpu_backend(false).make_communicators({late.get()})[0], late.get());
  EXPECT_EQ(&cpu_backend(false).communicator(*late), late.get());
}

// Ranks that hand over their groups in different orders are refused, naming
// the entry: rank 1 lists group 'a' first, the others second (after a
// group of one, which needs no check), so the check meets on 'a' and
// cannot hang.
TEST(CommAtStart, DifferentOrdersAreRefused) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 120);
  auto a = world.dup("a");
  auto one = world.split(world.rank(), 0, "one");
  std::vector<Communicator*> order = {one.get(), a.get()};
  if (world.rank() == 1) order = {a.get(), one.get()};
  try {
    cpu_backend(false).make_communicators(order);
    ADD_FAILURE() << "different orders were accepted";
  } catch (const Error& e) {
    const std::string want = world.rank() == 1 ? "entry 0 of" : "entry 1 of";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}
}  // namespace
