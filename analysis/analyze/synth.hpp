// Synthetic run folders with known answers (run.json + per-rank JSONL in the
// trainer's schema), for the analysis tests and the benchmark. Every rank's
// step takes the same wall time (synchronous training): a planted straggler
// computes longer and the others wait in collectives; checkpoints add a known
// stall on their step and a known slowdown a few steps later.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace st::analysis {

struct SynthSpec {
  std::string dir;
  std::string model_name = "synth-1b";
  int64_t n_params = 1'300'000'000;
  int n_layers = 24, d_model = 2048, n_heads = 16, seq_len = 2048;
  int world = 8, ranks_per_host = 4, steps = 200;
  int micro_batch = 4, grad_accum = 1;
  int64_t global_batch_tokens = 0;  // 0: micro_batch * grad_accum * seq_len * world (weak scaling)
  double step_s = 1.0;              // base step time
  std::string device_name = "NVIDIA H100 80GB HBM3", device_kind = "cuda";
  std::string precision = "bf16", act_ckpt = "full";
  double peak_flops = 0;            // device.peak_flops in run.json (0: omitted)
  int ckpt_interval = 0;            // 0: no checkpoints
  double ckpt_stall = 0.5;          // ckpt_stall_s on the checkpoint step (added to its step time)
  std::vector<double> ckpt_stalls;  // per checkpoint in order, instead of ckpt_stall (beyond
                                    // its end: ckpt_stall)
  int ckpt_slow_offset = 3;         // a later step slowed by background writing
  double ckpt_slow_extra = 0.8;
  int straggler_rank = -1;
  double straggler_extra = 0.3;  // extra compute (fraction of step_s) on that rank
  double jitter = 0.01;          // deterministic per-rank compute spread (fraction)
  int threads = 1;               // writer threads
  double cpu_s = 0;              // every rank's cpu_s a step (0: left out, as before the field)
};

// Writes spec.dir/run.json and spec.dir/telemetry/rank_NNNNN.jsonl.
void write_synthetic_run(const SynthSpec& spec);

// The step time of step i (1-based) every rank records, and the sum over steps.
double synth_step_time(const SynthSpec& spec, int step);
double synth_total_step_time(const SynthSpec& spec);
// The stall of the checkpoint at step i (0 when step i takes none).
double synth_ckpt_stall(const SynthSpec& spec, int step);

}  // namespace st::analysis
