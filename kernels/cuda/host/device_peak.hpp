// The dense bf16 peak the CUDA backend reports MFU against when
// runtime.gpu_peak_tflops is not set: a pure function of what the device
// says about itself (cudaDeviceProp's name and SM count), compiled without
// nvcc and tested on CPUs (label cuda-host).
//  - An H200 NVL (PCIe card, 600 W) is not an H200 SXM: its own column of
//    NVIDIA's H200 product page (nvidia.com/en-us/data-center/h200,
//    "preliminary specifications"), BFLOAT16 Tensor Core 1,671 TFLOPS "with
//    sparsity" beside the SXM's 1,979, so 835.5 dense (NVIDIA gives only the
//    sparse figure; dense is half, as for every Hopper row). Checked against
//    copies of that table quoted in public notes, not the page itself.
//    lib/metrics's table has only the SXM row, whose name match would
//    otherwise take it. An H100 NVL has no known row (nullopt).
//  - Every other device: lib/metrics's table (metrics::peak_flops).
//  - The table's figure is for the full chip; a device reporting fewer SMs
//    than that chip has (a MIG instance, a cut-down part) gets the figure
//    scaled by its share of the SMs.
#pragma once
#include <optional>
#include <string>

namespace st::cuda_host {

struct GpuPeak {
  double flops = 0;    // dense bf16 FLOP/s
  std::string source;  // the row and, when scaled, the SM share
};

// The full chip's SM count for a table device ("H200 NVL", "H100 SXM", ...),
// 0 when unknown.
int full_sm_count(const std::string& canonical_device);

std::optional<GpuPeak> gpu_bf16_peak(const std::string& device_name, int sm_count);
}  // namespace st::cuda_host
