// The one table of dense peak FLOP/s per device and precision, and tolerant
// matching of device names (nvidia-smi / torch names, MPT table names).
// All figures are dense (no 2:4 sparsity); vendor sheets often print the
// sparse figure, which is 2x.
#include <algorithm>
#include <cctype>

#include "metrics/metrics.hpp"

namespace st::metrics {
namespace {

std::string norm(const std::string& s) {
  std::string o;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    o += (c == '_' || c == '-') ? ' ' : char(std::tolower(u));
  }
  return o;
}

bool has(const std::string& s, const char* w) { return s.find(w) != std::string::npos; }

}  // namespace

const std::vector<Peak>& peak_table() {
  // Sources:
  //  A100: NVIDIA A100 datasheet: BF16/FP16 tensor 312 TFLOPS dense (624
  //        sparse), FP32 19.5 TFLOPS, TF32 156 TFLOPS dense. llm-foundry uses
  //        312e12 for the MPT tables (analysis/reference/README.md).
  //  H100 SXM: NVIDIA H100 datasheet: BF16 1,979 TFLOPS *with sparsity* ->
  //        989 dense; FP8 3,958 sparse -> 1,979 dense; FP32 67; TF32 494.7
  //        dense (also glennklockwood.com/garden/processors/h100: BF16 matrix
  //        989.4). llm-foundry: H100 bf16 989e12, fp8 1979e12.
  //  H100 PCIe: NVIDIA H100 datasheet: BF16 1,513 sparse -> 756 dense; FP8
  //        3,026 sparse -> 1,513 dense; FP32 51.
  //  H200: NVIDIA H200 datasheet: same GH100 compute as H100 SXM: BF16 1,979
  //        sparse -> 989 dense; FP8 3,958 sparse -> 1,979 dense; FP32 67.
  //  B200: NVIDIA HGX B200 (1,000 W): BF16 2.25 PFLOPS dense (4.5 sparse),
  //        FP8 4.5 PFLOPS dense (glennklockwood.com/garden/processors/B200).
  //  MI300X: AMD Instinct MI300X datasheet: BF16 1,307.4 TFLOPS dense
  //        (2,614.9 with sparsity); FP8 2,614.9 dense; FP32 vector 163.4.
  static const std::vector<Peak> t = {
      {"A100", "bf16", 312e12, "NVIDIA A100 datasheet (dense)"},
      {"A100", "fp16", 312e12, "NVIDIA A100 datasheet (dense)"},
      {"A100", "tf32", 156e12, "NVIDIA A100 datasheet (dense)"},
      {"A100", "fp32", 19.5e12, "NVIDIA A100 datasheet"},
      {"H100 SXM", "bf16", 989e12, "NVIDIA H100 datasheet (1979 sparse / 2)"},
      {"H100 SXM", "fp16", 989e12, "NVIDIA H100 datasheet (1979 sparse / 2)"},
      {"H100 SXM", "fp8", 1979e12, "NVIDIA H100 datasheet (3958 sparse / 2)"},
      {"H100 SXM", "tf32", 494.7e12, "NVIDIA H100 datasheet (989 sparse / 2)"},
      {"H100 SXM", "fp32", 67e12, "NVIDIA H100 datasheet"},
      {"H100 PCIe", "bf16", 756e12, "NVIDIA H100 datasheet (1513 sparse / 2)"},
      {"H100 PCIe", "fp16", 756e12, "NVIDIA H100 datasheet (1513 sparse / 2)"},
      {"H100 PCIe", "fp8", 1513e12, "NVIDIA H100 datasheet (3026 sparse / 2)"},
      {"H100 PCIe", "fp32", 51e12, "NVIDIA H100 datasheet"},
      {"H200", "bf16", 989e12, "NVIDIA H200 datasheet (1979 sparse / 2)"},
      {"H200", "fp16", 989e12, "NVIDIA H200 datasheet (1979 sparse / 2)"},
      {"H200", "fp8", 1979e12, "NVIDIA H200 datasheet (3958 sparse / 2)"},
      {"H200", "fp32", 67e12, "NVIDIA H200 datasheet"},
      {"B200", "bf16", 2250e12, "NVIDIA HGX B200 spec (dense)"},
      {"B200", "fp16", 2250e12, "NVIDIA HGX B200 spec (dense)"},
      {"B200", "fp8", 4500e12, "NVIDIA HGX B200 spec (dense)"},
      {"MI300X", "bf16", 1307.4e12, "AMD Instinct MI300X datasheet (dense)"},
      {"MI300X", "fp16", 1307.4e12, "AMD Instinct MI300X datasheet (dense)"},
      {"MI300X", "fp8", 2614.9e12, "AMD Instinct MI300X datasheet (dense)"},
  };
  return t;
}

std::string canonical_precision(const std::string& precision) {
  std::string p = norm(precision);
  if (p.rfind("amp ", 0) == 0) p = p.substr(4);
  if (p == "bf16" || p == "bfloat16") return "bf16";
  if (p == "fp16" || p == "float16" || p == "half") return "fp16";
  if (p == "fp8" || p == "float8" || p == "fp8 e4m3") return "fp8";
  if (p == "fp32" || p == "float32" || p == "float") return "fp32";
  if (p == "tf32") return "tf32";
  return "";
}

std::string canonical_device(const std::string& device_name) {
  const std::string d = norm(device_name);
  if (has(d, "mi300x")) return "MI300X";
  if (has(d, "b200")) return "B200";
  if (has(d, "h200")) return "H200";
  if (has(d, "h100")) {
    if (has(d, "pcie")) return "H100 PCIe";
    if (has(d, "nvl")) return "";  // H100 NVL has its own peak; not in the table
    return "H100 SXM";             // "H100 80GB HBM3", "H100 SXM5", "h100_80gb"
  }
  if (has(d, "a100")) return "A100";
  return "";
}

std::optional<Peak> peak_flops(const std::string& device_name, const std::string& precision) {
  const std::string dev = canonical_device(device_name);
  const std::string prec = canonical_precision(precision);
  if (dev.empty() || prec.empty()) return std::nullopt;
  for (const Peak& p : peak_table())
    if (p.device == dev && p.precision == prec) return p;
  return std::nullopt;
}

}  // namespace st::metrics
