// The shape checks of CudaBackend::supports() (see supports.hpp).
#include "kernels/cuda/host/supports.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/host/launch_limits.hpp"

namespace st::cuda_host {

std::string supports_shapes(const Config& cfg) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  if (m.n_heads <= 0 || p.tp <= 0 || p.cp <= 0) return "";  // the schema refuses these
  const int64_t hd = m.d_model / m.n_heads, hq = m.n_heads / p.tp,
                hkv = std::max(1, m.n_kv_heads / p.tp), t = m.seq_len / p.cp;
  const std::string why = attention_limits(cfg.train.micro_batch, t, t, hq, hkv, hd);
  if (why.empty()) return "";
  auto kv = [](const char* k, int v) { return std::string(k) + "=" + std::to_string(v); };
  return "runtime.device=cuda cannot run this attention shape (" + kv("model.d_model", m.d_model) +
         ", " + kv("model.n_heads", m.n_heads) + ", " + kv("model.n_kv_heads", m.n_kv_heads) +
         ", " + kv("model.seq_len", m.seq_len) + ", " +
         kv("train.micro_batch", cfg.train.micro_batch) + ", " + kv("parallel.tp", p.tp) + ", " +
         kv("parallel.cp", p.cp) + "): " + why;
}
}  // namespace st::cuda_host
