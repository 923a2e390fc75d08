// Each custom CUDA kernel (kernels/cuda/ops_cuda.hpp) against its CPU twin
// (kernels/cpu) on seeded random data at several shapes. Inputs are rounded
// to bf16 first so both sides see identical values; outputs are poisoned
// with NaN before every run. Tolerances (rtol of gpu_test_util.hpp's close()):
//   casts, embedding forward         exact (0)
//   embedding backward (fp32 sums)   1e-5
//   bf16 outputs of one rounding     8e-3 (bf16 has 8 significant bits)
//   bf16 outputs after a reduction   1e-2 (rmsnorm dx, swiglu dgate, dlogits)
//   fp32 statistics and optimizer    1e-3 (rstd, dw, lse, loss, AdamW w/m/v)
#include <cmath>

#include "ctest/cuda/gpu_test_util.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/ops.hpp"

namespace kc = st::kernels::cuda;
namespace kk = st::kernels;
using namespace st::test;

namespace {
constexpr cudaStream_t s0 = nullptr;

TEST(CudaKernels, Casts) {
  for (size_t n : {1ul, 1000ul, 123457ul}) {
    auto x = randn(n, 1, 3.f);
    auto dx = upload(x);
    auto db = poisoned(n * 2);
    kc::cast_f32_to_bf16(dx.as<float>(), db.as<bf16>(), int64_t(n), s0);
    auto got = download_bf16(db, n);
    EXPECT_TRUE(close(got, round_bf16(x), 0, "cast f32->bf16"));
    auto df = poisoned(n * 4);
    kc::cast_bf16_to_f32(db.as<bf16>(), df.as<float>(), int64_t(n), s0);
    EXPECT_TRUE(close(download<float>(df, n), round_bf16(x), 0, "cast bf16->f32"));
  }
}

TEST(CudaKernels, Embedding) {
  struct S {
    int64_t rows, vocab, d;
  };
  for (auto [rows, vocab, d] : {S{7, 11, 16}, S{256, 1000, 96}, S{1024, 50, 2048}}) {
    std::vector<int32_t> tok(rows);
    for (int64_t r = 0; r < rows; ++r) tok[r] = int32_t((r * 7919 + 13) % vocab);
    auto table = round_bf16(randn(vocab * d, 2));
    std::vector<float> ref(rows * d);
    kk::embedding_fwd(tok.data(), rows, table.data(), vocab, d, ref.data());
    auto dtok = upload(tok);
    auto dtab = upload(to_bf16(table));
    auto dout = poisoned(rows * d * 2);
    kc::embedding_fwd(dtok.as<int32_t>(), rows, dtab.as<bf16>(), vocab, d, dout.as<bf16>(), s0);
    EXPECT_TRUE(close(download_bf16(dout, rows * d), ref, 0, "embedding_fwd"));

    auto dy = round_bf16(randn(rows * d, 3));
    auto g0 = randn(vocab * d, 4);  // gradients accumulate into existing values
    auto gref = g0;
    kk::embedding_bwd(tok.data(), rows, dy.data(), vocab, d, gref.data());
    auto ddy = upload(to_bf16(dy));
    auto dg = upload(g0);
    kc::embedding_bwd(dtok.as<int32_t>(), rows, ddy.as<bf16>(), vocab, d, dg.as<float>(), s0);
    EXPECT_TRUE(close(download<float>(dg, vocab * d), gref, 1e-5, "embedding_bwd"));
  }
}

// Vocab-parallel shard: rows of other shards are 0 in forward and untouched
// in backward (the CPU twin's rule), for the first, a middle and the last
// shard of 4.
TEST(CudaKernels, EmbeddingShard) {
  const int64_t rows = 300, vocab = 1000, d = 64, tp = 4, vl = vocab / tp;
  std::vector<int32_t> tok(rows);
  for (int64_t r = 0; r < rows; ++r) tok[r] = int32_t((r * 7919 + 13) % vocab);
  auto dtok = upload(tok);
  for (int64_t part : {0, 2, 3}) {
    const int64_t v0 = part * vl;
    auto table = round_bf16(randn(vl * d, 5 + int(part)));
    std::vector<float> ref(rows * d);
    kk::embedding_fwd_shard(tok.data(), rows, table.data(), v0, vl, d, ref.data());
    auto dtab = upload(to_bf16(table));
    auto dout = poisoned(rows * d * 2);
    kc::embedding_fwd_shard(dtok.as<int32_t>(), rows, dtab.as<bf16>(), v0, vl, d, dout.as<bf16>(),
                            s0);
    EXPECT_TRUE(close(download_bf16(dout, rows * d), ref, 0, "embedding_fwd_shard"));

    auto dy = round_bf16(randn(rows * d, 9));
    auto g0 = randn(vl * d, 10);
    auto gref = g0;
    kk::embedding_bwd_shard(tok.data(), rows, dy.data(), v0, vl, d, gref.data());
    auto ddy = upload(to_bf16(dy));
    auto dg = upload(g0);
    kc::embedding_bwd_shard(dtok.as<int32_t>(), rows, ddy.as<bf16>(), v0, vl, d, dg.as<float>(),
                            s0);
    EXPECT_TRUE(close(download<float>(dg, vl * d), gref, 1e-5, "embedding_bwd_shard"));
  }
}

TEST(CudaKernels, RmsNorm) {
  struct S {
    int64_t rows, d;
  };
  for (auto [rows, d] : {S{3, 64}, S{128, 1000}, S{512, 4096}}) {
    auto x = round_bf16(randn(rows * d, 5));
    auto w = round_bf16(randn(d, 6, 0.5f));
    std::vector<float> y(rows * d), rstd(rows);
    kk::rmsnorm_fwd(x.data(), w.data(), rows, d, 1e-5f, y.data(), rstd.data());
    auto dx_ = upload(to_bf16(x)), dw_ = upload(to_bf16(w));
    auto dy_ = poisoned(rows * d * 2), dr = poisoned(rows * 4);
    kc::rmsnorm_fwd(dx_.as<bf16>(), dw_.as<bf16>(), rows, d, 1e-5f, dy_.as<bf16>(), dr.as<float>(),
                    s0);
    EXPECT_TRUE(close(download_bf16(dy_, rows * d), y, 8e-3, "rmsnorm_fwd y"));
    EXPECT_TRUE(close(download<float>(dr, rows), rstd, 1e-3, "rmsnorm_fwd rstd"));

    auto gy = round_bf16(randn(rows * d, 7));
    for (bool acc : {false, true}) {
      auto gx0 = round_bf16(randn(rows * d, 8));
      auto gw0 = randn(d, 9);
      auto gx = gx0, gw = gw0;
      kk::rmsnorm_bwd(x.data(), w.data(), rstd.data(), gy.data(), rows, d, gx.data(), gw.data(),
                      acc);
      auto dgy = upload(to_bf16(gy)), drs = upload(rstd), dgw = upload(gw0);
      auto dgx = acc ? upload(to_bf16(gx0)) : poisoned(rows * d * 2);
      kc::rmsnorm_bwd(dx_.as<bf16>(), dw_.as<bf16>(), drs.as<float>(), dgy.as<bf16>(), rows, d,
                      dgx.as<bf16>(), dgw.as<float>(), acc, s0);
      EXPECT_TRUE(close(download_bf16(dgx, rows * d), gx, 1e-2,
                        acc ? "rmsnorm_bwd dx (+=)" : "rmsnorm_bwd dx"));
      EXPECT_TRUE(close(download<float>(dgw, d), gw, 1e-3, "rmsnorm_bwd dw"));
    }
  }
}

TEST(CudaKernels, Rope) {
  struct S {
    int64_t B, T, H, hd, pos0;
  };
  for (auto [B, T, H, hd, pos0] : {S{1, 5, 2, 8, 0}, S{2, 64, 4, 64, 3}, S{1, 512, 8, 128, 100}}) {
    std::vector<float> c(T * hd / 2), s(T * hd / 2);
    kk::rope_table(T, hd, 10000.0, pos0, c.data(), s.data());
    auto dc = poisoned(c.size() * 4), ds = poisoned(s.size() * 4);
    kc::rope_table(T, hd, 10000.0, pos0, dc.as<float>(), ds.as<float>(), s0);
    EXPECT_TRUE(close(download<float>(dc, c.size()), c, 1e-5, "rope_table cos"));
    EXPECT_TRUE(close(download<float>(ds, s.size()), s, 1e-5, "rope_table sin"));
    const int64_t n = B * T * H * hd;
    auto x = round_bf16(randn(n, 10));
    for (int dir = 0; dir < 2; ++dir) {
      auto ref = x;
      if (dir == 0)
        kk::rope_fwd(ref.data(), B, T, H, hd, c.data(), s.data());
      else
        kk::rope_bwd(ref.data(), B, T, H, hd, c.data(), s.data());
      auto dx = upload(to_bf16(x));
      if (dir == 0)
        kc::rope_fwd(dx.as<bf16>(), B, T, H, hd, dc.as<float>(), ds.as<float>(), s0);
      else
        kc::rope_bwd(dx.as<bf16>(), B, T, H, hd, dc.as<float>(), ds.as<float>(), s0);
      EXPECT_TRUE(close(download_bf16(dx, n), ref, 8e-3, dir == 0 ? "rope_fwd" : "rope_bwd"));
    }
  }
}

TEST(CudaKernels, SwiGlu) {
  for (int64_t n : {1L, 4097L, 1L << 20}) {
    auto g = round_bf16(randn(n, 11, 2.f)), u = round_bf16(randn(n, 12)),
         dy = round_bf16(randn(n, 13));
    std::vector<float> out(n), dg(n), du(n);
    kk::swiglu_fwd(g.data(), u.data(), n, out.data());
    kk::swiglu_bwd(g.data(), u.data(), dy.data(), n, dg.data(), du.data());
    auto dgate = upload(to_bf16(g)), dup = upload(to_bf16(u)), ddy = upload(to_bf16(dy));
    auto dout = poisoned(n * 2), ddg = poisoned(n * 2), ddu = poisoned(n * 2);
    kc::swiglu_fwd(dgate.as<bf16>(), dup.as<bf16>(), n, dout.as<bf16>(), s0);
    kc::swiglu_bwd(dgate.as<bf16>(), dup.as<bf16>(), ddy.as<bf16>(), n, ddg.as<bf16>(),
                   ddu.as<bf16>(), s0);
    EXPECT_TRUE(close(download_bf16(dout, n), out, 8e-3, "swiglu_fwd"));
    EXPECT_TRUE(close(download_bf16(ddg, n), dg, 1e-2, "swiglu_bwd dgate"));
    EXPECT_TRUE(close(download_bf16(ddu, n), du, 8e-3, "swiglu_bwd dup"));
  }
}

void ce_case(int64_t rows, int64_t V, bool vocab_parallel) {
  auto x = round_bf16(randn(rows * V, 14, 3.f));
  std::vector<int32_t> tgt(rows);
  for (int64_t r = 0; r < rows; ++r) tgt[r] = r % 5 == 4 ? -1 : int32_t((r * 104729) % V);
  std::vector<float> lse(rows), dref(rows * V);
  int64_t nv = 0;
  const float loss = kk::cross_entropy_fwd(x.data(), tgt.data(), rows, V, lse.data(), &nv);
  kk::cross_entropy_bwd(x.data(), tgt.data(), lse.data(), rows, V, nv, 1.f, dref.data());
  auto dt = upload(tgt);
  auto dl = poisoned(rows * 4), drl = poisoned(rows * 4);
  std::vector<float> dgot(rows * V);
  if (!vocab_parallel) {
    auto dx = upload(to_bf16(x));
    kc::cross_entropy_fwd(dx.as<bf16>(), dt.as<int32_t>(), rows, V, dl.as<float>(), drl.as<float>(),
                          s0);
    kc::cross_entropy_bwd(dx.as<bf16>(), dt.as<int32_t>(), dl.as<float>(), rows, V, 0, nv, 1.f,
                          dx.as<bf16>(), s0);  // in place, as the model does
    dgot = download_bf16(dx, rows * V);
  } else {
    // Two vocabulary shards on one GPU; the caller's all-reduces done on the host.
    const int64_t V0 = V / 2, Vs[2] = {V0, V - V0}, off[2] = {0, V0};
    std::vector<float> mx[2], se[2], tl[2];
    std::vector<st::cuda::DeviceBuffer> shards;
    for (int p = 0; p < 2; ++p) {
      std::vector<float> xs(rows * Vs[p]);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < Vs[p]; ++j) xs[r * Vs[p] + j] = x[r * V + off[p] + j];
      shards.push_back(upload(to_bf16(xs)));
      auto a = poisoned(rows * 4), b = poisoned(rows * 4), c = poisoned(rows * 4);
      kc::cross_entropy_vp_partial(shards[p].as<bf16>(), dt.as<int32_t>(), rows, Vs[p], off[p],
                                   a.as<float>(), b.as<float>(), c.as<float>(), s0);
      auto gm = download<float>(a, rows);
      mx[p] = gm;
      se[p] = download<float>(b, rows);
      tl[p] = download<float>(c, rows);
    }
    std::vector<float> gmax(rows), sum(rows, 0.f), tsum(rows, 0.f);
    for (int64_t r = 0; r < rows; ++r) gmax[r] = std::max(mx[0][r], mx[1][r]);
    auto dg = upload(gmax);
    for (int p = 0; p < 2; ++p) {
      auto dm = upload(mx[p]), ds = upload(se[p]);
      kc::cross_entropy_vp_rescale(dm.as<float>(), dg.as<float>(), ds.as<float>(), rows, s0);
      auto r = download<float>(ds, rows);
      for (int64_t i = 0; i < rows; ++i) sum[i] += r[i], tsum[i] += tl[p][i];
    }
    auto dsum = upload(sum), dtl = upload(tsum);
    kc::cross_entropy_vp_finish(dg.as<float>(), dsum.as<float>(), dtl.as<float>(), dt.as<int32_t>(),
                                rows, dl.as<float>(), drl.as<float>(), s0);
    for (int p = 0; p < 2; ++p) {
      kc::cross_entropy_bwd(shards[p].as<bf16>(), dt.as<int32_t>(), dl.as<float>(), rows, Vs[p],
                            off[p], nv, 1.f, shards[p].as<bf16>(), s0);
      auto g = download_bf16(shards[p], rows * Vs[p]);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < Vs[p]; ++j) dgot[r * V + off[p] + j] = g[r * Vs[p] + j];
    }
  }
  EXPECT_TRUE(close(download<float>(dl, rows), lse, 1e-3, "cross_entropy lse"));
  int64_t nv_gpu = -1;
  const float loss_gpu =
      kc::cross_entropy_loss(drl.as<float>(), dt.as<int32_t>(), rows, &nv_gpu, s0);
  EXPECT_EQ(nv_gpu, nv);
  EXPECT_TRUE(close({loss_gpu}, {loss}, 1e-3, "cross_entropy loss"));
  EXPECT_TRUE(close(dgot, dref, 1e-2, "cross_entropy dlogits"));
}

TEST(CudaKernels, CrossEntropy) {
  ce_case(5, 17, false);
  ce_case(64, 1000, false);
  ce_case(256, 32000, false);
}

TEST(CudaKernels, CrossEntropyVocabParallel) {
  ce_case(5, 17, true);
  ce_case(128, 32001, true);
}

TEST(CudaKernels, AdamWMultiTensorWithClip) {
  // Sizes straddle the 64Ki chunk and the 24-tensor / 256-block list limits.
  std::vector<int64_t> sizes = {1, 100, 65536, 65537, 300000};
  for (int i = 0; i < 30; ++i) sizes.push_back(1000 + 37 * i);
  sizes.push_back(int64_t(256) * 65536 + 5);
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  for (float max_norm : {0.f, 1.f}) {
    std::vector<std::vector<float>> w, g, m, v;
    double ss = 0;
    for (size_t t = 0; t < sizes.size(); ++t) {
      w.push_back(randn(sizes[t], 100 + t));
      g.push_back(randn(sizes[t], 200 + t, 0.01f));
      m.push_back(randn(sizes[t], 300 + t, 0.001f));
      auto vv = randn(sizes[t], 400 + t, 1e-4f);
      for (auto& q : vv) q = q * q;
      v.push_back(vv);
      for (float q : g.back()) ss += double(q) * q;
    }
    std::vector<st::cuda::DeviceBuffer> bw, bg, bm, bv, bb;
    std::vector<kc::AdamWTensor> list;
    std::vector<const float*> gp;
    for (size_t t = 0; t < sizes.size(); ++t) {
      bw.push_back(upload(w[t])), bg.push_back(upload(g[t])), bm.push_back(upload(m[t])),
          bv.push_back(upload(v[t])), bb.push_back(poisoned(sizes[t] * 2));
      list.push_back({bw[t].as<float>(), bg[t].as<float>(), bm[t].as<float>(), bv[t].as<float>(),
                      bb[t].as<bf16>(), sizes[t], t % 2 ? 0.1f : 0.f});
      gp.push_back(bg[t].as<float>());
    }
    auto dss = poisoned(4);
    kc::multi_tensor_sumsq(gp, sizes, dss.as<float>(), s0);
    EXPECT_TRUE(close(download<float>(dss, 1), {float(ss)}, 1e-3, "multi_tensor_sumsq"));
    const double norm = std::sqrt(ss);
    const float coef = (max_norm > 0 && norm > max_norm) ? float(max_norm / (norm + 1e-6)) : 1.f;
    kc::adamw_multi(list, lr, b1, b2, eps, 7, dss.as<float>(), max_norm, s0);
    for (size_t t = 0; t < sizes.size(); ++t) {
      auto gs = g[t];
      for (auto& q : gs) q *= coef;
      kk::adamw_step(w[t].data(), gs.data(), m[t].data(), v[t].data(), sizes[t], lr, b1, b2, eps,
                     t % 2 ? 0.1f : 0.f, 7);
      EXPECT_TRUE(close(download<float>(bw[t], sizes[t]), w[t], 1e-3, "adamw w"));
      EXPECT_TRUE(close(download<float>(bm[t], sizes[t]), m[t], 1e-3, "adamw m"));
      EXPECT_TRUE(close(download<float>(bv[t], sizes[t]), v[t], 1e-3, "adamw v"));
      EXPECT_TRUE(close(download_bf16(bb[t], sizes[t]), round_bf16(w[t]), 8e-3, "adamw w_bf16"));
    }
  }
}
}  // namespace
