// FLOP counts per sequence and per token (see metrics.hpp for the formulas).
#include "metrics/metrics.hpp"

namespace st::metrics {

double mpt_flops_per_seq_fwd(const ModelShape& m) {
  const double T = m.seq_len;
  const double dense = 2.0 * double(m.n_params) * T;
  const double attn = double(m.n_layers) * 2.0 * 2.0 * double(m.d_model) * T * T;
  return dense + attn;
}

double mpt_model_flops_per_seq(const ModelShape& m) { return 3.0 * mpt_flops_per_seq_fwd(m); }

double hw_flops_per_seq(const ModelShape& m, double model_flops_per_seq,
                        const std::string& act_ckpt) {
  const double T = m.seq_len;
  if (act_ckpt == "full") return model_flops_per_seq * 4.0 / 3.0;
  if (act_ckpt == "selective")
    return model_flops_per_seq + double(m.n_layers) * 4.0 * double(m.d_model) * T * T;
  return model_flops_per_seq;
}

double flops_per_token_6n12lhqt(const ModelShape& m) {
  const double H = m.n_heads;
  const double Q = m.n_heads > 0 ? double(m.d_model) / H : 0.0;
  return 6.0 * double(m.n_params) + 12.0 * double(m.n_layers) * H * Q * double(m.seq_len);
}

double utilization(double flops_per_seq, double seq_per_s, int n_devices, double peak_flops) {
  if (n_devices <= 0 || peak_flops <= 0) return 0.0;
  return flops_per_seq * seq_per_s / (double(n_devices) * peak_flops);
}

}  // namespace st::metrics
