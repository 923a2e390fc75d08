// scaletrain-bench-step: one GPU's bf16 training step at a model preset's
// shape, through the code the trainer runs: the shared Model and Engine on
// the CUDA backend (backend_for with runtime.device=cuda loads
// libscaletrain_cuda.so), synthetic tokens, full activation checkpointing,
// the seeded initial weights, AdamW.
//
//   scaletrain-bench-step --preset llama-1b|llama-7b [--seq 4096]
//                         [--micro-batch 1] [--steps 5] [--warmup 1]
//
// Prints one line per step, then key=value lines: tokens_per_s, mfu, hfu
// (llm-foundry/MPT FLOP formulas of lib/metrics against the backend's peak:
// runtime.gpu_peak_tflops or the device's dense bf16 row), peak_device_gib
// (the device allocator's in-use peak, workspaces included) and the
// forward, backward and optimizer seconds per step (device time from CUDA
// events). Warm-up steps (plan building, allocator warm-up) are not timed.
// Runs on one rank. Exit 77 when no GPU is visible, 2 on a usage error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "parallel/mesh.hpp"
#include "runtime/runtime.hpp"

namespace {
int usage(const char* msg) {
  std::fprintf(stderr,
               "bench-step: %s\nusage: scaletrain-bench-step --preset NAME [--seq T] "
               "[--micro-batch B] [--steps N] [--warmup W]\n",
               msg);
  return 2;
}

// The measured steps' sums (seconds, the largest peak).
struct Totals {
  double wall = 0, fwd = 0, bwd = 0, opt = 0;
  int64_t peak_bytes = 0;
};

// The summary lines gpu-check.sh reads: per-step means, tokens/s, MFU/HFU at
// the device's peak, the peak memory and what ran.
void print_summary(const st::Config& cfg, st::Backend& be, const Totals& t, int steps) {
  const st::ModelCfg& m = cfg.model;
  const int mb = cfg.train.micro_batch, seq = m.seq_len;
  const double step_s = t.wall / steps;
  const double seq_per_s = double(mb) / step_s;
  st::metrics::ModelShape shape;
  shape.n_params = st::count_params(m);
  shape.n_layers = m.n_layers;
  shape.d_model = m.d_model;
  shape.n_heads = m.n_heads;
  shape.seq_len = seq;
  std::printf("params=%lld\nstep_s=%.4f\nfwd_s=%.4f\nbwd_s=%.4f\nopt_s=%.4f\n",
              static_cast<long long>(shape.n_params), step_s, t.fwd / steps, t.bwd / steps,
              t.opt / steps);
  std::printf("tokens_per_s=%.1f\n", double(mb) * seq / step_s);
  if (auto peak = be.peak(cfg)) {
    const double mfu = st::metrics::utilization(st::metrics::mpt_model_flops_per_seq(shape),
                                                seq_per_s, 1, peak->flops);
    const double hfu = st::metrics::utilization(st::metrics::mpt_hw_flops_per_seq(shape, "full"),
                                                seq_per_s, 1, peak->flops);
    std::printf("peak_tflops=%.1f (%s)\nmfu=%.4f\nhfu=%.4f\n", peak->flops / 1e12,
                peak->source.c_str(), mfu, hfu);
  } else {
    std::printf("peak_tflops=unknown\nmfu=n/a\nhfu=n/a\n");
  }
  std::printf("peak_device_gib=%.2f\n", double(t.peak_bytes) / double(1ull << 30));
  // What ran (scripts/gpu-check.sh fails when the block kernels ran where
  // cuDNN was expected): "... cuDNN fwd/bwd a/b, block kernels fwd/bwd c/d".
  std::printf("ops_ran=%s\n", be.ops().describe().c_str());
}
}  // namespace

int main(int argc, char** argv) {
  st::Runtime rt(&argc, &argv);
  std::string preset = "llama-1b";
  int seq = 4096, mb = 1, steps = 5, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("unknown or incomplete argument " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--preset")
      preset = v;
    else if (a == "--seq")
      seq = std::atoi(v.c_str());
    else if (a == "--micro-batch")
      mb = std::atoi(v.c_str());
    else if (a == "--steps")
      steps = std::atoi(v.c_str());
    else if (a == "--warmup")
      warmup = std::atoi(v.c_str());
    else
      return usage(("unknown argument " + a).c_str());
  }
  if (seq < 1 || mb < 1 || steps < 1 || warmup < 0)
    return usage("--seq, --micro-batch and --steps must be >= 1, --warmup >= 0");
  if (rt.world_size() != 1) return usage("runs on one rank (one GPU)");
  int n_gpus = 0;
  if (cudaGetDeviceCount(&n_gpus) != cudaSuccess || n_gpus == 0) {
    std::printf("SKIP: no CUDA device visible; scaletrain-bench-step needs a GPU\n");
    return 77;
  }
  try {
    st::Config cfg = st::load_config(
        st::preset_dir() + "/" + preset + ".yaml",
        // uint32 token ids: llama-1b's vocabulary does not fit uint16.
        {"runtime.device=cuda", "train.precision=bf16", "train.act_ckpt=full", "data.dtype=uint32",
         "train.micro_batch=" + std::to_string(mb), "train.grad_accum=1",
         "model.seq_len=" + std::to_string(seq), "train.steps=" + std::to_string(warmup + steps)});
    st::resolve_layout(cfg, 1);
    const st::ModelCfg& m = cfg.model;
    std::printf(
        "preset=%s layers=%d d_model=%d heads=%d kv_heads=%d ffn=%d vocab=%d seq=%d "
        "micro_batch=%d steps=%d warmup=%d act_ckpt=full precision=bf16\n",
        preset.c_str(), m.n_layers, m.d_model, m.n_heads, m.n_kv_heads, m.ffn_hidden, m.vocab_size,
        seq, mb, steps, warmup);
    st::Backend& be = st::backend_for(cfg);
    if (std::string why = be.supports(cfg); !why.empty()) throw st::UsageError(why);
    if (std::string why = be.preflight(cfg, rt.local_rank(), rt.local_size()); !why.empty())
      throw st::UsageError(why);
    st::MpiCommunicator world(MPI_COMM_WORLD, "world", cfg.runtime.timeout_s);
    st::Mesh mesh(world, st::MeshDims{1, 1, 1, 1});
    const double t_init = st::wall_time();
    st::Engine engine(cfg, mesh, be);
    std::printf("device=%s (%s)\nops=%s\ninit_s=%.1f\n", be.device().name().c_str(),
                be.device().id().c_str(), be.ops().describe().c_str(), st::wall_time() - t_init);
    st::DataLoader loader(st::make_source(cfg.data, cfg.train.seed, m.vocab_size, m.seq_len),
                          m.seq_len, mb, 1, 1, 0);

    double wall = 0, fwd = 0, bwd = 0, opt = 0;
    int64_t peak_bytes = 0;
    for (int s = 1; s <= warmup + steps; ++s) {
      const double t0 = st::wall_time();
      engine.begin_step();
      const st::StepOut o = engine.forward_backward(s, loader);
      double exposed = 0;
      const double opt_s = engine.apply(s, cfg.optim.lr, o.grad_norm, !o.finite, &exposed);
      const double dt = st::wall_time() - t0;  // apply() synchronises the device
      const int64_t peak = engine.memory().peak_total;
      std::printf(
          "step %d loss=%.4f grad_norm=%.3f wall_s=%.3f fwd_s=%.3f bwd_s=%.3f opt_s=%.3f "
          "peak_gib=%.2f%s\n",
          s, o.loss, o.grad_norm, dt, o.t.fwd, o.t.bwd, opt_s, double(peak) / double(1ull << 30),
          s <= warmup ? " (warm-up)" : "");
      std::fflush(stdout);
      if (s > warmup) {
        wall += dt;
        fwd += o.t.fwd;
        bwd += o.t.bwd;
        opt += opt_s;
        peak_bytes = std::max(peak_bytes, peak);
      }
    }
    print_summary(cfg, be, {wall, fwd, bwd, opt, peak_bytes}, steps);
    return 0;
  } catch (const st::UsageError& e) {
    std::fprintf(stderr, "bench-step: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-step: %s\n", e.what());
    return 1;
  }
}
