// `scaletrain-plan calibrate-gpu`: measures a GPU cluster file's `rates.gemm`
// on the machine it runs on, with scaletrain-bench-gemm (the backend's
// cuBLASLt bf16 GEMM) at a grid of shapes whose smallest dimension spans the
// GEMMs of a training step, and writes the cluster file with the measured
// table in place of the published one. The attention and NCCL rows are not
// measured yet (docs/planner.md). Needs a GPU: without one the bench exits
// 77 and this reports that, exit 2.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "plan/cluster.hpp"

namespace st::plan {

using GemmShape = std::array<int64_t, 3>;  // M, N, K
// Smallest dimension 256 ... 8192 against 8192 x 8192.
std::vector<GemmShape> default_gemm_shapes();
// Runs `bench M N K iters` per shape; the achieved rate from its last
// "bf16_gemm_tflops=" line. UsageError naming the command on failure.
std::vector<GemmRate> measure_gemm(const std::string& bench, const std::vector<GemmShape>& shapes,
                                   int iters, std::ostream& log);
// `base_text` (a cluster file) with its rates.gemm entries replaced by
// `gemm` (the comment lines just above them, the published table's
// citation, by one saying it was measured) and its `calibrated:` section by
// `calibrated`; every other line, comments included, as it was.
std::string splice_gemm_rates(const std::string& base_text, const std::vector<GemmRate>& gemm,
                              const std::map<std::string, std::string>& calibrated);
// Loads `base`, measures rates.gemm (measure_gemm), writes `out`: base's
// text with the table spliced in, so the sources cited in its comments stay.
void calibrate_gpu(const std::string& base, const std::string& out, const std::string& bench,
                   const std::string& command, std::ostream& log);

}  // namespace st::plan
