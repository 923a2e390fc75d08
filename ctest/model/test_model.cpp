// Model tests: parameter names and count, whole-model gradient against
// central finite differences, activation-checkpointing modes bitwise equal
// (and ordered by the activation memory they keep), grad_scale semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "model/model.hpp"

namespace {
st::ModelCfg tiny_cfg() {
  st::ModelCfg c;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 32;
  c.vocab_size = 32;
  c.seq_len = 8;
  c.init_std = 0.02;
  return c;
}

struct Batch {
  int B, T;
  std::vector<int32_t> tokens, targets;
};
Batch make_batch(int B, int T, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b{B, T, {}, {}};
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
    b.targets.push_back(int32_t(rng() % uint32_t(vocab)));
  }
  return b;
}
}  // namespace

TEST(Model, NamesShapesAndCount) {
  st::ModelCfg c = tiny_cfg();
  st::Model m(c, 1);
  EXPECT_EQ(m.num_params(), st::count_params(c));
  auto ps = m.params();
  ASSERT_EQ(ps.size(), size_t(3 + 9 * c.n_layers));
  EXPECT_EQ(ps.front()->name, "tok_embeddings.weight");
  EXPECT_EQ(ps[1]->name, "layers.0.attention_norm.weight");
  EXPECT_EQ(ps[3]->name, "layers.0.attention.wk.weight");
  EXPECT_EQ(ps[3]->w.shape(), (std::vector<int64_t>{8, 16}));  // n_kv_heads*hd x d
  EXPECT_EQ(ps[5]->name, "layers.0.attention.wo.weight");
  EXPECT_EQ(ps.back()->name, "output.weight");
  for (auto* p : ps) {
    const bool norm = p->name.find("norm") != std::string::npos;
    EXPECT_EQ(p->decay, !norm) << p->name;
    EXPECT_EQ(p->g.shape(), p->w.shape());
  }
  // Seeded init: same seed same weights, the std is about init_std.
  st::Model m2(c, 1), m3(c, 2);
  const auto& w1 = m.params()[2]->w;
  EXPECT_EQ(0, std::memcmp(w1.data(), m2.params()[2]->w.data(), w1.bytes()));
  EXPECT_NE(0, std::memcmp(w1.data(), m3.params()[2]->w.data(), w1.bytes()));
  const auto& emb = m.params()[0]->w;
  double ss = 0;
  for (int64_t i = 0; i < emb.numel(); ++i) ss += double(emb.data()[i]) * emb.data()[i];
  EXPECT_NEAR(std::sqrt(ss / double(emb.numel())), c.init_std, 0.1 * c.init_std);
  // 7B-like layout count: 32 layers, d 4096, ffn 11008, vocab 32000 -> 6.74B.
  st::ModelCfg big;
  big.n_layers = 32, big.d_model = 4096, big.n_heads = 32, big.n_kv_heads = 32;
  big.ffn_hidden = 11008, big.vocab_size = 32000;
  EXPECT_EQ(st::count_params(big), 6738415616);
}

TEST(Model, BadInputsAreUsageErrors) {
  EXPECT_EQ(st::parse_act_ckpt("selective"), st::ActCkpt::Selective);
  EXPECT_THROW(st::parse_act_ckpt("some"), st::UsageError);
  st::ModelCfg c = tiny_cfg();
  c.n_kv_heads = 3;
  EXPECT_THROW(st::Model(c, 1), st::UsageError);
  st::Model m(tiny_cfg(), 1);
  Batch b = make_batch(1, 9, 32, 1);  // T > seq_len
  EXPECT_THROW(m.forward_loss(b.tokens.data(), b.targets.data(), 1, 9), st::UsageError);
}

// Whole-model gradient vs central differences in fp32. init_std 0.2 makes
// every gradient large enough to be measured through fp32 rounding; step 1e-2
// keeps truncation error small. Per tensor, over a sample of 6 entries, the
// norm-based relative error ||analytic - fd|| / ||fd|| must be < 5e-3 (measured ~1e-3).
TEST(Model, GradientMatchesFiniteDifferences) {
  st::ModelCfg c = tiny_cfg();
  c.init_std = 0.2;
  st::Model m(c, 7);
  const Batch b = make_batch(2, 8, c.vocab_size, 3);
  m.zero_grad();
  const float loss =
      m.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, st::ActCkpt::None);
  EXPECT_TRUE(std::isfinite(loss));
  const double h = 1e-2;
  double worst = 0;
  for (st::Param* p : m.params()) {
    double num = 0, den = 0;
    const int64_t n = p->w.numel();
    for (int s = 0; s < 6; ++s) {
      const int64_t i = (int64_t(s) * 7919 + 13) % n;
      float* w = p->w.data() + i;
      const float w0 = *w;
      *w = float(w0 + h);
      const double lp = m.forward_loss(b.tokens.data(), b.targets.data(), b.B, b.T);
      *w = float(w0 - h);
      const double lm = m.forward_loss(b.tokens.data(), b.targets.data(), b.B, b.T);
      *w = w0;
      const double fd = (lp - lm) / (2 * h), an = p->g.data()[i];
      num += (an - fd) * (an - fd);
      den += fd * fd;
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-7);
    EXPECT_LT(rel, 5e-3) << p->name << " |fd|=" << std::sqrt(den);
    worst = std::max(worst, rel);
  }
  std::cout << "worst per-tensor relative error vs finite differences: " << worst << "\n";
}

TEST(Model, CheckpointModesAreBitwiseEqualAndSaveMemory) {
  st::ModelCfg c = tiny_cfg();
  c.n_layers = 3;
  const Batch b = make_batch(2, 8, c.vocab_size, 5);
  const st::ActCkpt modes[] = {st::ActCkpt::None, st::ActCkpt::Selective, st::ActCkpt::Full};
  std::vector<float> losses;
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<int64_t> act_peak;
  for (auto mode : modes) {
    st::Model m(c, 11);
    // Two calls: grads accumulate, and the second sees non-zero grads.
    float loss = 0;
    for (int rep = 0; rep < 2; ++rep) {
      const int64_t before = st::MemStats::current(st::MemCat::Activations);
      st::MemStats::reset_peaks();
      loss = m.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, mode);
      const st::StepMeasured pt = m.take_times();
      EXPECT_GT(pt.fwd, 0);
      EXPECT_GT(pt.bwd, 0);
      if (rep == 1) act_peak.push_back(st::MemStats::peak(st::MemCat::Activations) - before);
      EXPECT_EQ(st::MemStats::current(st::MemCat::Activations), before) << "activations leaked";
    }
    losses.push_back(loss);
    grads.emplace_back();
    for (auto* p : m.params()) grads.back().emplace_back(p->g.data(), p->g.data() + p->g.numel());
  }
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(std::memcmp(&losses[0], &losses[i], sizeof(float)), 0) << "mode " << i;
    for (size_t t = 0; t < grads[0].size(); ++t)
      EXPECT_EQ(grads[0][t], grads[i][t]) << "mode " << i << " tensor " << t;
  }
  // Measured peak activation bytes: full < selective < none.
  EXPECT_LT(act_peak[2], act_peak[1]);
  EXPECT_LT(act_peak[1], act_peak[0]);
}

// runtime.head_chunk_mb (ModelOptions::head_chunk_bytes): the LM head in 6
// chunks of 3 rows gives the loss and gradients of the one-chunk default,
// up to the order of the fp32 sums (the head gradient adds the chunks).
TEST(Model, HeadChunkBudgetKeepsLossAndGradients) {
  st::ModelCfg c = tiny_cfg();
  const Batch b = make_batch(2, 8, c.vocab_size, 13);
  st::Model whole(c, 17);
  st::ModelOptions o;
  o.head_chunk_bytes = 3 * c.vocab_size * 4;  // 3 fp32 rows of logits
  st::Model chunked(c, 17, st::ModelParallel{}, o);
  const float l1 =
      whole.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, st::ActCkpt::None);
  const float l2 =
      chunked.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, st::ActCkpt::None);
  EXPECT_NEAR(l1, l2, 1e-6 * std::fabs(l1));
  auto p1 = whole.params(), p2 = chunked.params();
  ASSERT_EQ(p1.size(), p2.size());
  for (size_t t = 0; t < p1.size(); ++t) {
    double num = 0, den = 1e-12;
    for (int64_t i = 0; i < p1[t]->g.numel(); ++i) {
      num = std::max(num, double(std::fabs(p1[t]->g.data()[i] - p2[t]->g.data()[i])));
      den = std::max(den, double(std::fabs(p1[t]->g.data()[i])));
    }
    EXPECT_LT(num / den, 1e-5) << p1[t]->name;
  }
}

TEST(Model, GradScaleScalesAndForwardLossAgrees) {
  st::ModelCfg c = tiny_cfg();
  const Batch b = make_batch(2, 6, c.vocab_size, 9);  // T < seq_len
  st::Model m1(c, 3), m2(c, 3);
  const float l1 =
      m1.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.f, st::ActCkpt::None);
  const float l2 =
      m2.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 4.f, st::ActCkpt::None);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(l1, m1.forward_loss(b.tokens.data(), b.targets.data(), b.B, b.T));
  EXPECT_NEAR(l1, std::log(float(c.vocab_size)), 0.1);  // near-uniform at init
  auto p1 = m1.params(), p2 = m2.params();
  for (size_t t = 0; t < p1.size(); ++t)
    for (int64_t i = 0; i < p1[t]->g.numel(); ++i)
      ASSERT_EQ(4.f * p1[t]->g.data()[i], p2[t]->g.data()[i]) << p1[t]->name;
  m1.zero_grad();
  for (auto* p : m1.params())
    for (int64_t i = 0; i < p->g.numel(); ++i) ASSERT_EQ(p->g.data()[i], 0.f);
}
