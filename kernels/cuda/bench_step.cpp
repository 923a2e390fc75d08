// scaletrain-bench-step: training-step throughput of the one-GPU bf16
// CudaLlama (kernels/cuda/train_step.hpp) at a model preset's shape, random
// init, random tokens, full activation checkpointing.
//
//   scaletrain-bench-step --preset llama-1b|llama-7b [--seq 4096]
//                         [--micro-batch 1] [--steps 5] [--warmup 1]
//
// Prints key=value lines: tokens_per_s, mfu, hfu (llm-foundry/MPT FLOP
// formulas of lib/metrics, peak from metrics::peak_flops(device, "bf16")),
// peak_device_gib (caching allocator's in-use peak) and per-phase times.
// Warm-up steps (plan building, allocator warm-up) are not timed.
// Exit 77 when no GPU is visible, 2 on a usage error.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "kernels/cuda/train_step.hpp"
#include "metrics/metrics.hpp"

namespace kc = st::kernels::cuda;

int main(int argc, char** argv) {
  std::string preset = "llama-1b";
  int seq = 4096, mb = 1, steps = 5, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench-step: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--preset") preset = next();
    else if (a == "--seq") seq = std::atoi(next().c_str());
    else if (a == "--micro-batch") mb = std::atoi(next().c_str());
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else {
      std::fprintf(stderr,
                   "usage: scaletrain-bench-step --preset NAME [--seq T] [--micro-batch B] "
                   "[--steps N] [--warmup W]\n");
      return 2;
    }
  }
  if (seq < 1 || mb < 1 || steps < 1 || warmup < 0) {
    std::fprintf(stderr, "bench-step: --seq, --micro-batch, --steps must be >= 1\n");
    return 2;
  }
  try {
    const st::Config cfg = st::load_config(st::preset_dir() + "/" + preset + ".yaml", {});
    const st::ModelCfg& m = cfg.model;
    std::printf("preset=%s layers=%d d_model=%d heads=%d kv_heads=%d ffn=%d vocab=%d seq=%d "
                "micro_batch=%d steps=%d act_ckpt=full\n",
                preset.c_str(), m.n_layers, m.d_model, m.n_heads, m.n_kv_heads, m.ffn_hidden,
                m.vocab_size, seq, mb, steps);
    std::string why;
    if (st::cuda::device_count(&why) == 0) {
      std::printf("SKIP: %s; scaletrain-bench-step needs a GPU\n", why.c_str());
      return 77;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    const std::string device = prop.name;

    kc::CudaLlama model(m);
    model.init_random(1234);
    const int64_t n = int64_t(mb) * seq;
    std::vector<int32_t> tok(size_t(n + 1));
    std::mt19937 rng(7);
    for (auto& t : tok) t = int32_t(rng() % uint32_t(m.vocab_size));
    const std::vector<int32_t> inputs(tok.begin(), tok.end() - 1), targets(tok.begin() + 1, tok.end());

    double fwd = 0, bwd = 0, opt = 0, wall = 0;
    float loss = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      loss = model.step_forward_backward(inputs.data(), targets.data(), mb, seq, true);
      model.optimizer_step(1e-4f, 1.0f);
      const kc::StepTimes& t = model.last_times();  // synchronises
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %d loss=%.4f wall_s=%.3f fwd_s=%.3f bwd_s=%.3f opt_s=%.3f%s\n", s, loss,
                  dt, t.fwd_s, t.bwd_s, t.opt_s, s < warmup ? " (warm-up)" : "");
      if (s >= warmup) {
        wall += dt;
        fwd += t.fwd_s;
        bwd += t.bwd_s;
        opt += t.opt_s;
      }
    }
    const double step_s = wall / steps;
    const double tokens_per_s = double(n) / step_s;
    st::metrics::ModelShape shape;
    shape.n_params = model.num_params();
    shape.n_layers = m.n_layers;
    shape.d_model = m.d_model;
    shape.n_heads = m.n_heads;
    shape.seq_len = seq;
    const double seq_per_s = double(mb) / step_s;
    std::printf("device=%s\nparams=%lld\nstep_s=%.4f\nfwd_s=%.4f\nbwd_s=%.4f\nopt_s=%.4f\n",
                device.c_str(), static_cast<long long>(shape.n_params), step_s, fwd / steps,
                bwd / steps, opt / steps);
    std::printf("tokens_per_s=%.1f\n", tokens_per_s);
    if (auto peak = st::metrics::peak_flops(device, "bf16")) {
      const double mfu = st::metrics::utilization(st::metrics::mpt_model_flops_per_seq(shape),
                                                  seq_per_s, 1, peak->flops);
      const double hfu = st::metrics::utilization(st::metrics::mpt_hw_flops_per_seq(shape, true),
                                                  seq_per_s, 1, peak->flops);
      std::printf("peak_tflops=%.1f (%s)\nmfu=%.4f\nhfu=%.4f\n", peak->flops / 1e12,
                  peak->device.c_str(), mfu, hfu);
    } else {
      std::printf("peak_tflops=unknown (device '%s' not in metrics::peak_table)\nmfu=n/a\nhfu=n/a\n",
                  device.c_str());
    }
    std::printf("peak_device_gib=%.2f\nfinal_loss=%.4f\n",
                double(model.peak_device_bytes()) / double(1ull << 30), loss);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-step: %s\n", e.what());
    return 1;
  }
}
