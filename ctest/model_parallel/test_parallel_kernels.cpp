// The kernels behind context and tensor parallelism against the plain ones:
// attention over K/V blocks (load-balanced chunks, merged by log-sum-exp)
// equals causal attention, forward and backward; vocab-parallel embedding
// and cross-entropy shards (tp = 1 is the one-shard case) equal the
// unsharded ops. fp32, max abs error relative to the largest reference value
// <= 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace k = st::kernels;
namespace {
std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / den;
}
// Rows of x [B, T, W] at sequence positions pos -> [B, |pos|, W].
std::vector<float> take(const std::vector<float>& x, int64_t B, int64_t T, int64_t W,
                        const std::vector<int32_t>& pos) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t p : pos)
      out.insert(out.end(), &x[size_t((b * T + p) * W)], &x[size_t((b * T + p + 1) * W)]);
  return out;
}
}  // namespace

TEST(RingAttentionKernels, BlocksMergedEqualCausalAttention) {
  const int64_t B = 2, T = 16, Hq = 4, Hkv = 2, hd = 8, P = 4, C = T / (2 * P);
  const float scale = 1.f / std::sqrt(float(hd));
  const auto q = randn(size_t(B * T * Hq * hd), 1), kk = randn(size_t(B * T * Hkv * hd), 2),
             v = randn(size_t(B * T * Hkv * hd), 3), dout = randn(size_t(B * T * Hq * hd), 4);
  std::vector<float> out(q.size()), lse(size_t(B * Hq * T)), dq(q.size()), dk(kk.size()),
      dv(v.size());
  k::attention_fwd(q.data(), kk.data(), v.data(), B, T, Hq, Hkv, hd, scale, out.data(), lse.data());
  k::attention_bwd(q.data(), kk.data(), v.data(), out.data(), lse.data(), dout.data(), B, T, Hq,
                   Hkv, hd, scale, dq.data(), dk.data(), dv.data());
  // Rank r holds chunks r and 2P-1-r.
  std::vector<std::vector<int32_t>> pos(P);
  for (int64_t r = 0; r < P; ++r)
    for (int64_t c : {r, 2 * P - 1 - r})
      for (int64_t t = 0; t < C; ++t) pos[size_t(r)].push_back(int32_t(c * C + t));
  const int64_t Tl = 2 * C;
  std::vector<std::vector<float>> dk_r(P), dv_r(P);
  for (int64_t r = 0; r < P; ++r) {
    dk_r[size_t(r)].assign(size_t(B * Tl * Hkv * hd), 0.f);
    dv_r[size_t(r)].assign(size_t(B * Tl * Hkv * hd), 0.f);
  }
  for (int64_t r = 0; r < P; ++r) {
    const auto ql = take(q, B, T, Hq * hd, pos[size_t(r)]);
    std::vector<float> o(ql.size()), l(size_t(B * Hq * Tl)), ob(ql.size()), lb(l.size());
    for (int64_t j = 0; j < P; ++j) {
      const int64_t s = (r + P - j) % P;
      const auto kl = take(kk, B, T, Hkv * hd, pos[size_t(s)]);
      const auto vl = take(v, B, T, Hkv * hd, pos[size_t(s)]);
      k::attention_fwd_block(ql.data(), kl.data(), vl.data(), B, Tl, Tl, Hq, Hkv, hd, scale,
                             pos[size_t(r)].data(), pos[size_t(s)].data(),
                             j == 0 ? o.data() : ob.data(), j == 0 ? l.data() : lb.data());
      if (j > 0) k::attention_lse_merge(o.data(), l.data(), ob.data(), lb.data(), B, Tl, Hq, hd);
    }
    EXPECT_LT(rel(o, take(out, B, T, Hq * hd, pos[size_t(r)])), 1e-5) << "rank " << r;
    // Backward with the merged out and lse.
    const auto dol = take(dout, B, T, Hq * hd, pos[size_t(r)]);
    std::vector<float> dql(ql.size(), 0.f);
    for (int64_t s = 0; s < P; ++s) {
      const auto kl = take(kk, B, T, Hkv * hd, pos[size_t(s)]);
      const auto vl = take(v, B, T, Hkv * hd, pos[size_t(s)]);
      k::attention_bwd_block(ql.data(), kl.data(), vl.data(), o.data(), l.data(), dol.data(), B, Tl,
                             Tl, Hq, Hkv, hd, scale, pos[size_t(r)].data(), pos[size_t(s)].data(),
                             dql.data(), dk_r[size_t(s)].data(), dv_r[size_t(s)].data());
    }
    EXPECT_LT(rel(dql, take(dq, B, T, Hq * hd, pos[size_t(r)])), 1e-5) << "rank " << r;
  }
  for (int64_t s = 0; s < P; ++s) {
    EXPECT_LT(rel(dk_r[size_t(s)], take(dk, B, T, Hkv * hd, pos[size_t(s)])), 1e-5);
    EXPECT_LT(rel(dv_r[size_t(s)], take(dv, B, T, Hkv * hd, pos[size_t(s)])), 1e-5);
  }
}

TEST(VocabParallelKernels, ShardsEqualFullOps) {
  const int64_t rows = 12, V = 32, d = 8, P = 4, Vl = V / P;
  std::mt19937 rng(5);
  std::vector<int32_t> tok(rows), tg(rows);
  for (int64_t r = 0; r < rows; ++r) {
    tok[size_t(r)] = int32_t(rng() % V);
    tg[size_t(r)] = r == 3 ? -1 : int32_t(rng() % V);
  }
  // Embedding: sum of the shards' masked lookups == the lookup.
  const auto table = randn(size_t(V * d), 6), dout = randn(size_t(rows * d), 7);
  std::vector<float> emb(size_t(rows * d)), sum(emb.size(), 0.f), part(emb.size());
  std::vector<float> dtab(table.size(), 0.f), dtab_s(table.size(), 0.f);
  k::embedding_fwd(tok.data(), rows, table.data(), V, d, emb.data());
  k::embedding_bwd(tok.data(), rows, dout.data(), V, d, dtab.data());
  for (int64_t p = 0; p < P; ++p) {
    k::embedding_fwd_shard(tok.data(), rows, table.data() + p * Vl * d, p * Vl, Vl, d, part.data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    k::embedding_bwd_shard(tok.data(), rows, dout.data(), p * Vl, Vl, d,
                           dtab_s.data() + p * Vl * d);
  }
  EXPECT_EQ(sum, emb);
  EXPECT_EQ(dtab_s, dtab);
  // Cross-entropy: global max / sums from the shards (the three steps of
  // ops.hpp) give the same lse, loss and dlogits as the one-shard case.
  auto logits = randn(size_t(rows * V), 8);
  for (auto& x : logits) x *= 3.f;
  const size_t R = size_t(rows);
  std::vector<float> m1(R), se1(R), tl1(R), lse(R), rl(R), dl(logits.size());
  k::ce_partial(logits.data(), tg.data(), rows, V, 0, m1.data(), se1.data(), tl1.data());
  k::ce_finish(m1.data(), se1.data(), tl1.data(), tg.data(), rows, lse.data(), rl.data());
  int64_t nv = 0;
  for (int32_t t : tg) nv += t >= 0;
  const double loss = k::loss_sum(rl.data(), tg.data(), rows) / double(nv);
  k::ce_bwd(logits.data(), tg.data(), lse.data(), rows, V, 0, 1.f / float(nv), dl.data());
  std::vector<std::vector<float>> sh(P), mx(P, std::vector<float>(R)), se(P, std::vector<float>(R)),
      tl(P, std::vector<float>(R));
  std::vector<float> gmax(R, -1e30f);
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t r = 0; r < rows; ++r)
      sh[size_t(p)].insert(sh[size_t(p)].end(), &logits[size_t(r * V + p * Vl)],
                           &logits[size_t(r * V + (p + 1) * Vl)]);
    k::ce_partial(sh[size_t(p)].data(), tg.data(), rows, Vl, p * Vl, mx[size_t(p)].data(),
                  se[size_t(p)].data(), tl[size_t(p)].data());
    for (size_t r = 0; r < R; ++r) gmax[r] = std::max(gmax[r], mx[size_t(p)][r]);  // all-reduce MAX
  }
  std::vector<float> se_sum(R, 0.f), tl_sum(R, 0.f);
  for (int64_t p = 0; p < P; ++p) {
    k::ce_rescale(mx[size_t(p)].data(), gmax.data(), se[size_t(p)].data(), rows);
    for (size_t r = 0; r < R; ++r) se_sum[r] += se[size_t(p)][r], tl_sum[r] += tl[size_t(p)][r];
  }
  std::vector<float> lse2(R), rl2(R);
  k::ce_finish(gmax.data(), se_sum.data(), tl_sum.data(), tg.data(), rows, lse2.data(), rl2.data());
  EXPECT_LT(rel(lse2, lse), 1e-6);
  EXPECT_NEAR(k::loss_sum(rl2.data(), tg.data(), rows) / double(nv), loss, 1e-5 * loss);
  std::vector<float> dl2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < P; ++p) {
      std::vector<float> g(static_cast<size_t>(Vl));
      k::ce_bwd(&sh[size_t(p)][size_t(r * Vl)], &tg[size_t(r)], &lse2[size_t(r)], 1, Vl, p * Vl,
                1.f / float(nv), g.data());
      dl2.insert(dl2.end(), g.begin(), g.end());
    }
  EXPECT_LT(rel(dl2, dl), 1e-5);
}
