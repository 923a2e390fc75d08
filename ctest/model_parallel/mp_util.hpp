// Shared by the model-parallel tests: a tiny config whose every dimension
// divides by 4 (tp, cp up to 4), seeded batches with some ignored targets,
// and the tolerance check every layout is held to (fp32, per tensor:
// max |got - want| <= 1e-5 * max |want|).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace mp {
inline st::ModelCfg cfg4() {
  st::ModelCfg c;
  c.n_layers = 4;
  c.d_model = 32;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.ffn_hidden = 64;
  c.vocab_size = 64;
  c.seq_len = 16;
  c.init_std = 0.1;
  return c;
}

struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
};
inline Batch make_batch(int B, int T, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b{B, T, {}, {}};
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
    b.targets.push_back(i % 7 == 3 ? -1 : int32_t(rng() % uint32_t(vocab)));
  }
  return b;
}

inline st::Param* find(st::Model& m, const std::string& name) {
  for (st::Param* p : m.params())
    if (p->name == name) return p;
  return nullptr;
}

// The block of a full tensor that a Param slice covers.
inline std::vector<float> slice_of(const st::Tensor& full, const st::Param& p) {
  std::vector<float> out;
  if (p.w.shape().size() == 1) {
    out.assign(full.data() + p.offset[0], full.data() + p.offset[0] + p.w.numel());
    return out;
  }
  const int64_t cols = full.dim(1);
  for (int64_t r = 0; r < p.w.dim(0); ++r) {
    const float* src = full.data() + (p.offset[0] + r) * cols + p.offset[1];
    out.insert(out.end(), src, src + p.w.dim(1));
  }
  return out;
}

// max |got - want| / max |want|.
inline double rel_err(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - double(want[i])));
    den = std::max(den, std::fabs(double(want[i])));
  }
  return den > 0 ? num / den : num;
}
constexpr double kTol = 1e-5;  // fp32
}  // namespace mp
