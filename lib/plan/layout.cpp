// Implementation of layout.hpp.
#include "plan/layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace st::plan {

std::vector<std::pair<int, int>> stage_layer_ranges(int n_layers, int pp, int chunks, int stage) {
  ST_CHECK(pp >= 1 && chunks >= 1 && stage >= 0 && stage < pp && n_layers % (pp * chunks) == 0,
           "bad stage shape n_layers=", n_layers, " pp=", pp, " chunks=", chunks);
  const int per = n_layers / (pp * chunks);
  std::vector<std::pair<int, int>> r;
  for (int c = 0; c < chunks; ++c)
    r.push_back({(c * pp + stage) * per, (c * pp + stage + 1) * per});
  return r;
}

MicroDims micro_dims(const Config& cfg) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  MicroDims D;
  D.B = cfg.train.micro_batch;
  D.T = m.seq_len / p.cp;
  D.N = D.B * D.T;
  D.Ns = p.sp ? D.N / p.tp : D.N;
  D.d = m.d_model;
  D.hd = m.d_model / m.n_heads;
  D.Hq = m.n_heads / p.tp;
  D.Hkv = m.n_kv_heads / p.tp;
  D.qd = D.Hq * D.hd;
  D.kd = D.Hkv * D.hd;
  D.F = m.ffn_hidden / p.tp;
  D.V = m.vocab_size / p.tp;
  return D;
}

int64_t model_params(const ModelCfg& c) {
  const int64_t d = c.d_model, hd = c.d_model / c.n_heads;
  const int64_t qd = c.n_heads * hd, kd = c.n_kv_heads * hd;
  const int64_t block = 2 * d + 2 * qd * d + 2 * kd * d + 3 * int64_t(c.ffn_hidden) * d;
  return 2 * int64_t(c.vocab_size) * d + c.n_layers * block + d;
}

StageShape stage_shape(const Config& cfg, int stage) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  StageShape s;
  s.stage = stage;
  s.chunks = stage_layer_ranges(m.n_layers, p.pp, p.num_model_chunks, stage);
  for (auto& [a, b] : s.chunks) s.layers += b - a;
  s.first = stage == 0;
  s.last = stage == p.pp - 1;
  const MicroDims D = micro_dims(cfg);
  // Norm weights are replicated over tp; the rest is split (wq/wk/wv/w1/w3
  // by rows, wo/w2 by columns, embedding and head by vocabulary rows).
  s.block_params = 2 * D.d + 2 * D.qd * D.d + 2 * D.kd * D.d + 3 * D.F * D.d;
  s.embed_params = s.first ? D.V * D.d : 0;
  s.head_params = s.last ? D.V * D.d + D.d : 0;
  s.params = s.layers * s.block_params + s.embed_params + s.head_params;
  return s;
}

std::vector<StageParam> stage_params(const Config& cfg, const StageShape& s) {
  const MicroDims D = micro_dims(cfg);
  std::vector<StageParam> ps;
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    if (s.first && c == 0) ps.push_back({double(D.V * D.d), -1, 0});
    for (int l = s.chunks[c].first; l < s.chunks[c].second; ++l) {
      // attention_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2
      const double sizes[9] = {double(D.d),        double(D.qd * D.d), double(D.kd * D.d),
                               double(D.kd * D.d), double(D.d * D.qd), double(D.d),
                               double(D.F * D.d),  double(D.F * D.d),  double(D.d * D.F)};
      for (double n : sizes) ps.push_back({n, l, int(c)});
    }
    if (s.last && c + 1 == s.chunks.size()) {
      ps.push_back({double(D.d), cfg.model.n_layers, int(c)});
      ps.push_back({double(D.V * D.d), cfg.model.n_layers, int(c)});
    }
  }
  return ps;
}

std::vector<GradBucket> grad_buckets(const Config& cfg, const std::vector<StageParam>& ps) {
  const double cap = std::max(1.0, double(int64_t(cfg.parallel.dp_bucket_mb * 1024 * 1024 / 4)));
  const bool split = cfg.parallel.zero_stage >= 3;
  std::vector<GradBucket> out;
  for (int i = int(ps.size()) - 1; i >= 0; --i) {
    const StageParam& p = ps[size_t(i)];
    const bool fits = !out.empty() && out.back().n + p.n <= cap &&
                      !(split && ps[size_t(out.back().first)].layer != p.layer);
    if (!fits) out.push_back({0, i});
    out.back().n += p.n;
    out.back().first = i;
  }
  return out;
}

std::vector<PipeStep> pipeline_ops(int pp, int chunks, int micro, int stage) {
  ST_CHECK(pp >= 1 && chunks >= 1 && micro >= 1 && stage >= 0 && stage < pp &&
               (chunks == 1 || micro % pp == 0),
           "bad pipeline shape pp=", pp, " chunks=", chunks, " micro=", micro);
  // Forward number k -> (micro, chunk): groups of pp micro-batches per
  // chunk; backwards walk the chunks in reverse.
  auto op = [&](int k, bool fwd) {
    const int group = k / (pp * chunks), in = k % (pp * chunks), c = in / pp;
    return PipeStep{fwd, group * pp + in % pp, fwd ? c : chunks - 1 - c};
  };
  const int total = micro * chunks;
  int warm = 0;
  if (chunks == 1)
    warm = std::min(pp - stage - 1, micro);
  else
    warm = micro == pp ? total : std::min(total, (pp - stage - 1) * 2 + (chunks - 1) * pp);
  std::vector<PipeStep> ops;
  for (int k = 0; k < warm; ++k) ops.push_back(op(k, true));
  for (int k = 0; k < total - warm; ++k) {
    ops.push_back(op(warm + k, true));
    ops.push_back(op(k, false));
  }
  for (int k = total - warm; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

}  // namespace st::plan
