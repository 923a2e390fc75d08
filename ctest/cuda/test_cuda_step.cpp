// The one-GPU bf16 training step (kernels/cuda/train_step.hpp) against the
// fp32 CPU model (lib/model) on a small config: the CPU model's initial
// weights are rounded to bf16 (so both sides start from identical values)
// and copied into CudaLlama; one forward + backward on the same tokens on
// both; the loss must agree to rel 2e-2 and every gradient to a
// norm-relative error ||g_gpu - g_cpu|| / ||g_cpu|| <= 5e-2 (bf16
// activations), with and without full activation checkpointing. Non-finite
// values never pass. Then a few AdamW steps on one batch must lower the loss.
#include <cmath>
#include <vector>

#include "ctest/cuda/gpu_test_util.hpp"
#include "kernels/cuda/train_step.hpp"
#include "model/model.hpp"

namespace kc = st::kernels::cuda;
using namespace st::test;

namespace {
st::ModelCfg small_cfg() {
  st::ModelCfg c;
  c.name = "cuda-step-test";
  c.n_layers = 2;
  c.d_model = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // GQA
  c.ffn_hidden = 320;
  c.vocab_size = 512;
  c.seq_len = 64;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  c.init_std = 0.02;
  return c;
}

void make_batch(int B, int T, int V, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
  tok.resize(size_t(B) * T);
  tgt.resize(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = int32_t((i * 7919 + 13) % size_t(V));
    tgt[i] = int32_t((i * 104729 + 71) % size_t(V));
  }
}

::testing::AssertionResult norm_close(const std::vector<float>& got, const std::vector<float>& ref,
                                      double tol, const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]))
      return ::testing::AssertionFailure() << what << ": non-finite value at " << i;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  if (!(err <= tol))
    return ::testing::AssertionFailure() << what << ": norm-relative error " << err << " > " << tol
                                         << " (|ref| " << std::sqrt(den) << ")";
  return ::testing::AssertionSuccess() << what << ": " << err;
}

TEST(CudaStep, MatchesCpuModel) {
  const st::ModelCfg cfg = small_cfg();
  const int B = 2, T = 64;
  st::Model cpu(cfg, 42);
  kc::CudaLlama gpu(cfg);
  for (st::Param* p : cpu.params()) {
    std::vector<float> w(p->w.data(), p->w.data() + p->w.numel());
    w = round_bf16(std::move(w));
    std::copy(w.begin(), w.end(), p->w.data());
    gpu.load_weights(p->name, w);
  }
  ASSERT_EQ(gpu.num_params(), cpu.num_params());
  std::vector<int32_t> tok, tgt;
  make_batch(B, T, cfg.vocab_size, tok, tgt);
  cpu.zero_grad();
  const float ref_loss = cpu.forward_backward(tok.data(), tgt.data(), B, T, 1.f, st::ActCkpt::None);
  for (bool ckpt : {false, true}) {
    SCOPED_TRACE(ckpt ? "full activation checkpointing" : "no checkpointing");
    const float loss = gpu.step_forward_backward(tok.data(), tgt.data(), B, T, ckpt);
    ASSERT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, ref_loss, 2e-2 * std::fabs(ref_loss)) << "gpu " << loss << " cpu " << ref_loss;
    for (st::Param* p : cpu.params()) {
      std::vector<float> ref(p->g.data(), p->g.data() + p->g.numel());
      EXPECT_TRUE(norm_close(gpu.copy_grads_to_host(p->name), ref, 5e-2, p->name));
    }
  }
  EXPECT_GT(gpu.peak_device_bytes(), 0);
}

TEST(CudaStep, LossFallsUnderAdamW) {
  const st::ModelCfg cfg = small_cfg();
  const int B = 2, T = 64;
  kc::CudaLlama gpu(cfg);
  gpu.init_random(5);
  std::vector<int32_t> tok, tgt;
  make_batch(B, T, cfg.vocab_size, tok, tgt);
  float first = 0, last = 0;
  for (int s = 0; s < 6; ++s) {
    const float loss = gpu.step_forward_backward(tok.data(), tgt.data(), B, T, s % 2 == 1);
    ASSERT_TRUE(std::isfinite(loss)) << "step " << s;
    if (s == 0) first = loss;
    last = loss;
    gpu.optimizer_step(3e-3f, 1.0f);
  }
  EXPECT_LT(last, first - 0.05f) << "first " << first << " last " << last;
  const kc::StepTimes& t = gpu.last_times();
  EXPECT_GT(t.fwd_s, 0);
  EXPECT_GT(t.bwd_s, 0);
  for (const auto& p : gpu.params())
    for (float w : gpu.copy_weights_to_host(p->name)) ASSERT_TRUE(std::isfinite(w)) << p->name;
}
}  // namespace
