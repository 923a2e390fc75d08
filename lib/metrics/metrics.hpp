// Metrics shared by the trainer and the analysis tools: FLOP counts per
// sequence / token (llm-foundry's MFU and HFU convention, and the PaLM
// 6N+12LHQT form), MFU/HFU helpers, and the one table of device peak FLOP/s.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace st::metrics {

struct ModelShape {
  int64_t n_params = 0;  // all parameters (llm-foundry counts embeddings too)
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int seq_len = 0;
};

// llm-foundry/MPT per-sequence FLOPs (see analysis/reference/README.md and
// llm-foundry's callbacks: flops_per_seq = 2*N*T, attn = L*2*2*d*T^2).
// Forward pass only: 2*N*T + n_layers*2*2*d_model*T^2.
double mpt_flops_per_seq_fwd(const ModelShape& m);
// Model FLOPs per sequence (MFU numerator): forward + backward = 3x forward.
double mpt_model_flops_per_seq(const ModelShape& m);
// Hardware FLOPs per sequence (HFU numerator) for an activation-checkpointing
// mode: the model FLOPs plus what is recomputed, the whole forward
// (model / 3) under "full", the attention core (QK^T and AV, 4*L*d*T^2)
// under "selective", nothing under "none". Works with either model-FLOPs
// formula (MPT or 6N+12LHQT). The one HFU numerator: the trainer, --dry-run,
// scaletrain-analyze and scaletrain-plan all call it.
double hw_flops_per_seq(const ModelShape& m, double model_flops_per_seq,
                        const std::string& act_ckpt);
// The same with the MPT model FLOPs (what the trainer and --dry-run print).
inline double mpt_hw_flops_per_seq(const ModelShape& m, const std::string& act_ckpt) {
  return hw_flops_per_seq(m, mpt_model_flops_per_seq(m), act_ckpt);
}

// Training FLOPs per *token* in the PaLM form (Chowdhery et al. 2022, App. B):
//   6*N + 12*L*H*Q*T
// N = parameters, L = layers, H = attention heads, Q = head dimension
// (d_model / H, so H*Q = d_model), T = sequence length. 6N is forward+backward
// of the dense matmuls (2N fwd, 4N bwd); 12*L*H*Q*T is forward+backward of the
// two attention matmuls (QK^T and AV), without causal-mask savings. Per
// sequence it equals mpt_model_flops_per_seq / T when N is the same count.
double flops_per_token_6n12lhqt(const ModelShape& m);

// MFU / HFU as fractions (0..1): flops_per_seq * seq_per_s / (gpus * peak).
double utilization(double flops_per_seq, double seq_per_s, int n_devices, double peak_flops);

// The steady state every summary reports (the trainer's last line, every
// scaletrain-analyze report): of the steps after the first `warmup` (fewer
// when the run holds fewer, so one step is always left), the back half; the
// statistic is the median of the window's step times (the slowest rank's
// time per step), by linear interpolation between closest ranks.
struct SteadyState {
  size_t first = 0, end = 0;  // window = step_s[first, end)
  int64_t warmup = 0;         // warm-up steps actually dropped
  double step_s = 0;          // median step time over the window
};
SteadyState steady_state(const std::vector<double>& step_s, int64_t warmup);
// The window's rule in words, for reports.
std::string steady_state_rule(int64_t warmup);
// Median with linear interpolation (numpy's default percentile method).
double median(std::vector<double> v);

struct Peak {
  std::string device;     // canonical name, e.g. "H100 SXM"
  std::string precision;  // canonical precision, e.g. "bf16"
  double flops = 0;       // dense FLOP/s per device
  std::string source;     // where the figure is published
};

// Canonical precision: "amp_bf16"/"bfloat16"/"bf16" -> "bf16", "amp_fp8" ->
// "fp8", "fp16"/"amp_fp16" -> "fp16", "float32"/"fp32" -> "fp32", "tf32".
// Returns "" when not recognised.
std::string canonical_precision(const std::string& precision);
// Canonical device from a free-form name ("NVIDIA H100 80GB HBM3" -> "H100 SXM",
// "h100_80gb" -> "H100 SXM", "NVIDIA A100-SXM4-40GB" -> "A100"); "" when unknown.
std::string canonical_device(const std::string& device_name);

// Dense peak FLOP/s for a device and precision; nullopt when unknown.
std::optional<Peak> peak_flops(const std::string& device_name, const std::string& precision);
// Every row of the table (for docs and --help).
const std::vector<Peak>& peak_table();

}  // namespace st::metrics
