// Every model-parallel layout against the single-rank model on the same
// weights and batches, under MPI: pipeline stages exchanging activations and
// gradients by send/recv (two micro-batches in flight, GPipe order), tensor
// parallelism with and without sequence parallelism, context parallelism
// (ring attention), and their combinations. Each rank also builds the
// single-rank model and checks: initial weights are bitwise its slices; the
// loss summed over cp equals the reference micro-batch loss; every local
// gradient, summed over cp, equals its slice of the reference gradient
// (fp32, per tensor max |err| <= 1e-5 * max |ref|). Layouts whose rank
// product is not the world size are skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <memory>
#include <sstream>

#include "comm/mpi_communicator.hpp"
#include "mp_util.hpp"

namespace {
struct Layout {
  int pp = 1, tp = 1, cp = 1;
  bool sp = false;
  st::ActCkpt mode = st::ActCkpt::None;
};
std::string str(const Layout& l) {
  std::ostringstream o;
  o << "pp" << l.pp << " tp" << l.tp << (l.sp ? "+sp" : "") << " cp" << l.cp << " ckpt"
    << int(l.mode);
  return o.str();
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void run_layout(const Layout& L) {
  const int W = world_size();
  if (L.pp * L.tp * L.cp != W)
    GTEST_SKIP() << str(L) << " needs " << L.pp * L.tp * L.cp << " ranks";
  st::MpiCommunicator world(MPI_COMM_WORLD, "world", 60.0);
  // rank = (pp_i * cp + cp_i) * tp + tp_i: tp fastest, as a Megatron mesh.
  const int r = world.rank(), tp_i = r % L.tp, cp_i = (r / L.tp) % L.cp, pp_i = r / (L.tp * L.cp);
  auto tp = world.split(pp_i * L.cp + cp_i, tp_i, "tp");
  auto cp = world.split(pp_i * L.tp + tp_i, cp_i, "cp");
  auto pp = world.split(cp_i * L.tp + tp_i, pp_i, "pp");
  const st::ModelCfg c = mp::cfg4();
  ASSERT_EQ(c.n_layers % L.pp, 0);
  st::ModelParallel par;
  par.tp = tp.get();
  par.cp = cp.get();
  par.sp = L.sp;
  par.layer_begin = pp_i * c.n_layers / L.pp;
  par.layer_end = (pp_i + 1) * c.n_layers / L.pp;
  par.has_embedding = pp_i == 0;
  par.has_head = pp_i == L.pp - 1;
  const uint64_t seed = 42;
  st::Model ref(c, seed), m(c, seed, par);

  // Initial weights: bitwise the reference's slices.
  for (st::Param* p : m.params()) {
    st::Param* q = mp::find(ref, p->name);
    ASSERT_NE(q, nullptr) << p->name;
    EXPECT_EQ(p->global_shape, q->w.shape()) << p->name;
    const auto want = mp::slice_of(q->w, *p);
    EXPECT_EQ(0, std::memcmp(p->w.data(), want.data(), p->w.bytes())) << p->name;
  }

  // Two micro-batches, GPipe order: all forwards, then all backwards.
  const int M = 2, B = 2, T = 16;
  const float gs = 1.f / float(M);
  std::vector<mp::Batch> mb;
  for (int i = 0; i < M; ++i) mb.push_back(mp::make_batch(B, T, c.vocab_size, 7 + i));
  std::vector<double> lref;
  for (auto& b : mb)
    lref.push_back(ref.forward_backward(b.tokens.data(), b.targets.data(), B, T, gs, L.mode));
  const int64_t nb = m.boundary_elems(B, T);
  std::vector<double> loss(size_t(M), 0.0);
  for (int i = 0; i < M; ++i) {
    st::Tensor x_in({nb}), x_out;
    if (!par.has_embedding) pp->recv(x_in.data(), nb, pp_i - 1, i);
    m.stage_forward(i, mb[size_t(i)].tokens.data(), &x_in, mb[size_t(i)].targets.data(), B, T,
                    L.mode, gs, &x_out);
    loss[size_t(i)] = m.take_loss();
    if (!par.has_head) {
      ASSERT_EQ(x_out.numel(), nb);
      pp->send(x_out.data(), nb, pp_i + 1, i);
    }
  }
  EXPECT_EQ(m.in_flight(), M);
  for (int i = 0; i < M; ++i) {
    st::Tensor dy({nb}), dx;
    if (!par.has_head) pp->recv(dy.data(), nb, pp_i + 1, 100 + i);
    m.stage_backward(i, &dy, gs, &dx);
    if (!par.has_embedding) pp->send(dx.data(), nb, pp_i - 1, 100 + i);
  }
  EXPECT_EQ(m.in_flight(), 0);

  // Loss: the last stage's shares summed over cp.
  if (par.has_head) {
    cp->all_reduce_sum(loss.data(), M);
    for (int i = 0; i < M; ++i)
      EXPECT_NEAR(loss[size_t(i)], lref[size_t(i)], mp::kTol * lref[size_t(i)])
          << str(L) << " micro " << i;
  }
  // Gradients: summed over cp, equal to the reference slices.
  for (st::Param* p : m.params()) {
    std::vector<float> g(p->g.data(), p->g.data() + p->g.numel());
    cp->all_reduce_sum(g.data(), int64_t(g.size()));
    const double e = mp::rel_err(g.data(), mp::slice_of(mp::find(ref, p->name)->g, *p));
    EXPECT_LE(e, mp::kTol) << str(L) << " rank " << r << " " << p->name;
  }
}
}  // namespace

TEST(ModelParallel, Pipeline2) { run_layout({2, 1, 1, false, st::ActCkpt::None}); }
TEST(ModelParallel, Pipeline4Selective) { run_layout({4, 1, 1, false, st::ActCkpt::Selective}); }
TEST(ModelParallel, Tensor2) { run_layout({1, 2, 1, false, st::ActCkpt::None}); }
TEST(ModelParallel, Tensor4Full) { run_layout({1, 4, 1, false, st::ActCkpt::Full}); }
TEST(ModelParallel, TensorSeq2) { run_layout({1, 2, 1, true, st::ActCkpt::None}); }
TEST(ModelParallel, TensorSeq2Selective) { run_layout({1, 2, 1, true, st::ActCkpt::Selective}); }
TEST(ModelParallel, TensorSeq4) { run_layout({1, 4, 1, true, st::ActCkpt::Full}); }
TEST(ModelParallel, Context2) { run_layout({1, 1, 2, false, st::ActCkpt::None}); }
TEST(ModelParallel, Context2Selective) { run_layout({1, 1, 2, false, st::ActCkpt::Selective}); }
TEST(ModelParallel, Context4) { run_layout({1, 1, 4, false, st::ActCkpt::Full}); }
TEST(ModelParallel, Tensor2Context2) { run_layout({1, 2, 2, false, st::ActCkpt::None}); }
TEST(ModelParallel, TensorSeq2Context2) { run_layout({1, 2, 2, true, st::ActCkpt::Selective}); }
TEST(ModelParallel, Pipeline2Tensor2) { run_layout({2, 2, 1, false, st::ActCkpt::None}); }
TEST(ModelParallel, Pipeline2TensorSeq2) { run_layout({2, 2, 1, true, st::ActCkpt::Full}); }
TEST(ModelParallel, Pipeline2Context2) { run_layout({2, 1, 2, false, st::ActCkpt::None}); }
