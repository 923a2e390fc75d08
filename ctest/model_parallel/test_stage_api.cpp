// Pipeline-stage API on one process: stage_forward/stage_backward with
// several micro-batches in flight equal forward_backward bitwise; two stage
// models (layer ranges) chained by hand equal the whole model bitwise; the
// layer hooks pair up and grad_ready reports every parameter once per
// backward; bad calls are usage errors.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "mp_util.hpp"

namespace {
std::vector<std::vector<float>> grads(st::Model& m) {
  std::vector<std::vector<float>> g;
  for (st::Param* p : m.params()) g.emplace_back(p->g.data(), p->g.data() + p->g.numel());
  return g;
}
}  // namespace

TEST(StageApi, MicroBatchesInFlightEqualForwardBackward) {
  const st::ModelCfg c = mp::cfg4();
  std::vector<mp::Batch> mb;
  for (int i = 0; i < 3; ++i) mb.push_back(mp::make_batch(2, 16, c.vocab_size, 10 + i));
  for (auto mode : {st::ActCkpt::None, st::ActCkpt::Selective, st::ActCkpt::Full}) {
    st::Model ref(c, 5), m(c, 5);
    std::vector<float> lref, l;
    for (auto& b : mb)
      lref.push_back(
          ref.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f / 3, mode));
    for (int i = 0; i < 3; ++i) {
      m.stage_forward(100 + i, mb[i].tokens.data(), nullptr, mb[i].targets.data(), 2, 16, mode,
                      1.f / 3, nullptr);
      l.push_back(float(m.take_loss()));
    }
    EXPECT_EQ(m.in_flight(), 3);
    for (int i = 0; i < 3; ++i) m.stage_backward(100 + i, nullptr, 1.f / 3, nullptr);
    EXPECT_EQ(m.in_flight(), 0);
    EXPECT_EQ(l, lref);
    EXPECT_EQ(grads(m), grads(ref));
  }
}

TEST(StageApi, TwoStagesChainedEqualWholeModel) {
  const st::ModelCfg c = mp::cfg4();
  const mp::Batch b = mp::make_batch(2, 12, c.vocab_size, 3);
  st::Model ref(c, 9);
  const float lref =
      ref.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 0.5f, st::ActCkpt::None);
  st::ModelParallel p0, p1;
  p0.layer_end = 1, p0.has_head = false;
  p1.layer_begin = 1, p1.has_embedding = false;
  st::Model s0(c, 9, p0), s1(c, 9, p1);
  EXPECT_EQ(s0.num_params() + s1.num_params(), ref.num_params());
  st::Tensor x, dx;
  s0.stage_forward(0, b.tokens.data(), nullptr, nullptr, b.B, b.T, st::ActCkpt::Selective, 0.5f,
                   &x);
  EXPECT_EQ(s0.take_loss(), 0.0);
  ASSERT_EQ(x.numel(), s0.boundary_elems(b.B, b.T));
  s1.stage_forward(0, nullptr, &x, b.targets.data(), b.B, b.T, st::ActCkpt::Full, 0.5f, nullptr);
  EXPECT_EQ(float(s1.take_loss()), lref);
  s1.stage_backward(0, nullptr, 0.5f, &dx);
  ASSERT_EQ(dx.numel(), x.numel());
  s0.stage_backward(0, &dx, 123.f /*ignored: not the last stage*/, nullptr);
  for (st::Model* s : {&s0, &s1})
    for (st::Param* p : s->params()) {
      st::Param* r = mp::find(ref, p->name);
      ASSERT_NE(r, nullptr) << p->name;
      EXPECT_EQ(0, std::memcmp(p->w.data(), r->w.data(), p->w.bytes())) << p->name;
      EXPECT_EQ(0, std::memcmp(p->g.data(), r->g.data(), p->g.bytes())) << p->name;
    }
  EXPECT_EQ(s0.params().front()->layer, -1);
  EXPECT_EQ(s1.params().back()->layer, c.n_layers);
}

TEST(StageApi, HooksPairUpAndReportEveryGradient) {
  const st::ModelCfg c = mp::cfg4();
  const mp::Batch b = mp::make_batch(1, 8, c.vocab_size, 4);
  st::Model m(c, 1);
  std::vector<std::pair<char, int>> ev;
  std::map<int, int> ready;
  int open = -100;
  bool nested = false;
  st::ModelHooks h;
  h.before_layer = [&](int l) {
    nested |= open != -100;
    open = l;
    ev.push_back({'b', l});
  };
  h.after_layer = [&](int l) {
    nested |= open != l;
    open = -100;
    ev.push_back({'a', l});
  };
  h.grad_ready = [&](int i) { ready[i]++; };
  m.set_hooks(h);
  for (auto mode : {st::ActCkpt::None, st::ActCkpt::Full}) {
    ev.clear();
    ready.clear();
    m.forward_backward(b.tokens.data(), b.targets.data(), 1, 8, 1.f, mode);
    EXPECT_FALSE(nested);
    // Forward -1..L, backward L-1..-1 (the head's backward runs in its
    // forward and needs no hooks): (L + 2) + (L + 1) pairs.
    ASSERT_EQ(ev.size(), size_t(2 * (2 * c.n_layers + 3)));
    EXPECT_EQ(ev.front(), std::make_pair('b', -1));
    EXPECT_EQ(ev[size_t(2 * (c.n_layers + 1))], std::make_pair('b', c.n_layers));
    EXPECT_EQ(ev[size_t(2 * (c.n_layers + 2))], std::make_pair('b', c.n_layers - 1));
    EXPECT_EQ(ev.back(), std::make_pair('a', -1));
    EXPECT_EQ(ready.size(), m.params().size());
    for (auto& [i, n] : ready) EXPECT_EQ(n, 1) << m.params()[size_t(i)]->name;
  }
}

// Calls out of order or missing an input are bugs of the caller (st::Error,
// exit 1); a batch or layer range the config asks for is bad input
// (st::UsageError, exit 2).
TEST(StageApi, BadCallsAreBugsAndBadShapesUsageErrors) {
  const st::ModelCfg c = mp::cfg4();
  const mp::Batch b = mp::make_batch(1, 8, c.vocab_size, 4);
  st::Model m(c, 1);
  m.stage_forward(1, b.tokens.data(), nullptr, b.targets.data(), 1, 8, st::ActCkpt::None, 1.f,
                  nullptr);
  EXPECT_THROW(m.stage_forward(1, b.tokens.data(), nullptr, b.targets.data(), 1, 8,
                               st::ActCkpt::None, 1.f, nullptr),
               st::Error);
  EXPECT_THROW(m.stage_backward(2, nullptr, 1.f, nullptr), st::Error);
  // The last stage's backward continues its forward's d(loss).
  EXPECT_THROW(m.stage_backward(1, nullptr, 0.5f, nullptr), st::Error);
  st::ModelParallel p;
  p.layer_begin = 2, p.has_embedding = false;
  st::Model s(c, 1, p);
  // The whole-model convenience on a pipeline stage: internal misuse, not
  // bad input (ST_INTERNAL_CHECK).
  EXPECT_THROW(s.forward_backward(b.tokens.data(), b.targets.data(), 1, 8, 1.f, st::ActCkpt::None),
               st::InternalError);
  try {
    s.forward_loss(b.tokens.data(), b.targets.data(), 1, 8);
    ADD_FAILURE() << "forward_loss on a pipeline stage did not throw";
  } catch (const st::UsageError&) {
    ADD_FAILURE() << "internal misuse reported as bad input (exit 2)";
  } catch (const st::InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("internal error"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      s.stage_forward(0, nullptr, nullptr, b.targets.data(), 1, 8, st::ActCkpt::None, 1.f, nullptr),
      st::Error);
  p.layer_begin = 5;
  EXPECT_THROW(st::Model(c, 1, p), st::UsageError);
}

// What ZeRO-3 will do: every weight's storage is released outside its
// layer's before/after hooks (before_layer restores it from a copy). The
// model must never read a weight outside them (a released tensor has no
// storage), and the result is bitwise the same; grad_ready comes while the
// layer is still open.
TEST(StageApi, WeightsReleasedOutsideTheirLayerHooks) {
  const st::ModelCfg c = mp::cfg4();
  const mp::Batch b = mp::make_batch(2, 8, c.vocab_size, 6);
  for (auto mode : {st::ActCkpt::None, st::ActCkpt::Selective, st::ActCkpt::Full}) {
    st::Model ref(c, 3);
    st::ModelOptions o;
    o.per_layer_weights = true;  // what ZeRO-3 uses: layers start released
    st::Model m(c, 3, {}, o);
    const float lref = ref.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, mode);
    std::vector<std::vector<float>> saved;
    auto ps = m.params();
    for (st::Param* p : ps) {
      EXPECT_FALSE(p->w.allocated()) << p->name;
      const st::Param* r = mp::find(ref, p->name);
      saved.emplace_back(r->w.data(), r->w.data() + r->w.numel());
    }
    int open = -100;
    st::ModelHooks h;
    h.before_layer = [&](int l) {
      open = l;
      m.allocate_layer_weights(l);
      for (size_t i = 0; i < ps.size(); ++i)
        if (ps[i]->layer == l) std::memcpy(ps[i]->w.data(), saved[i].data(), ps[i]->w.bytes());
    };
    h.after_layer = [&](int l) {
      open = -100;
      m.release_layer_weights(l);
      for (st::Param* p : ps)
        if (p->layer == l) {
          EXPECT_FALSE(p->w.allocated());
        }
    };
    bool outside = false;
    // The head reports after its forward, outside any hooks (model.hpp).
    h.grad_ready = [&](int i) {
      const int l = ps[size_t(i)]->layer;
      outside |= l != open && l != c.n_layers;
    };
    m.set_hooks(h);
    const float l = m.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, mode);
    EXPECT_EQ(l, lref);
    EXPECT_FALSE(outside);
    EXPECT_EQ(grads(m), grads(ref));
  }
}
