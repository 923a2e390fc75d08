// The device's dense bf16 peak (see device_peak.hpp).
#include "kernels/cuda/host/device_peak.hpp"

#include <algorithm>
#include <cctype>

#include "metrics/metrics.hpp"

namespace st::cuda_host {
namespace {
std::string lower(const std::string& s) {
  std::string o;
  for (char c : s) o += char(std::tolower(static_cast<unsigned char>(c)));
  return o;
}
}  // namespace

int full_sm_count(const std::string& d) {
  // GH100 parts: H100 SXM / H200 / H200 NVL 132 SMs, H100 PCIe 114; GA100
  // (A100) 108; B200 148 (NVIDIA architecture whitepapers and product sheets).
  if (d == "H100 SXM" || d == "H200" || d == "H200 NVL") return 132;
  if (d == "H100 PCIe") return 114;
  if (d == "A100") return 108;
  if (d == "B200") return 148;
  return 0;
}

std::optional<GpuPeak> gpu_bf16_peak(const std::string& device_name, int sm_count) {
  const std::string n = lower(device_name);
  std::string device;
  GpuPeak p;
  if (n.find("h200") != std::string::npos && n.find("nvl") != std::string::npos) {
    device = "H200 NVL";
    p = {835.5e12, "table: H200 NVL bf16 (NVIDIA H200 product page, NVL column: 1671 sparse / 2)"};
  } else if (auto t = metrics::peak_flops(device_name, "bf16")) {
    device = t->device;
    p = {t->flops, "table: " + t->device + " " + t->precision + " (" + t->source + ")"};
  } else {
    return std::nullopt;
  }
  const int full = full_sm_count(device);
  if (full > 0 && sm_count > 0 && sm_count < full) {
    p.flops *= double(sm_count) / double(full);
    p.source += ", scaled to " + std::to_string(sm_count) + " of " + std::to_string(full) + " SMs";
  }
  return p;
}
}  // namespace st::cuda_host
