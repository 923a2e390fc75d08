// `scaletrain-plan calibrate-gpu`: measures a GPU cluster file's `rates.gemm`
// on the machine it runs on, with scaletrain-bench-gemm (the backend's
// cuBLASLt bf16 GEMM) at a grid of shapes whose smallest dimension spans the
// GEMMs of a training step, and writes the cluster file with the measured
// table in place of the published one; given nccl-tests command lines, it
// also measures the busbw tables inside a node and across nodes, and with
// scaletrain-bench-attention the attention rows. Needs a GPU: without one
// the benches exit 77 and this reports that, exit 2.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/cluster.hpp"

namespace st::plan {

using GemmShape = std::array<int64_t, 3>;  // M, N, K
// Smallest dimension 256 ... 8192 against 8192 x 8192.
std::vector<GemmShape> default_gemm_shapes();
// The distinct GEMM shapes of one training step of cfg (valid; parallel.dp
// 0 taken as 1, which changes no GEMM: its layout's every stage, on the
// recording backend), in step
// order; shapes equal up to the order of their dimensions once (the
// planner takes a row of the same shape in any order), and none already in
// `skip`. What calibrate-gpu measures beside the default grid so that the
// model's own GEMMs are priced at their own measured rates.
std::vector<GemmShape> model_gemm_shapes(const Config& cfg, const std::vector<GemmShape>& skip);
// Runs `bench M N K iters` per shape; the achieved rate from its last
// "bf16_gemm_tflops=" line. UsageError naming the command on failure.
std::vector<GemmRate> measure_gemm(const std::string& bench, const std::vector<GemmShape>& shapes,
                                   int iters, std::ostream& log);
// The rows one run of scaletrain-bench-attention at sequence T and head dim
// hd gives: the causal row at T from its last "attn_fwd_tflops=" and
// "attn_bwd_tflops=" lines, and with `blocks` (it ran with --block) the
// ring's off-diagonal block as a `full` row at the chunk length T / 2 from
// "block_full_fwd_tflops=" / "block_full_bwd_tflops=". UsageError naming
// `what` when a line is missing or not a positive rate.
std::vector<AttnRate> parse_attention_bench(const std::string& text, const std::string& what,
                                            int hd, double T, bool blocks);
// Runs `bench [--block] T 128 16 16384 20` (scaletrain-bench-attention:
// cuDNN's causal SDPA, 16k tokens of 16 heads, as FlashAttention-3's
// published figures; --block: the ring blocks through the backend's Ops
// too) for T = 512 ... 16384 and parses each run.
std::vector<AttnRate> measure_attention(const std::string& bench, std::ostream& log,
                                        bool blocks = false);
// What scaletrain-bench-memory prints: one "mem_bytes=<B> mem_gbps=<x>" line
// per size and "launch_us=<x>". UsageError naming `what` when there are no
// sizes, a size is out of order or not positive, or no launch line.
struct MemoryBench {
  std::vector<MemRate> memory;  // ascending bytes
  double launch = -1;           // seconds
};
MemoryBench parse_memory_bench(const std::string& text, const std::string& what);
// Runs `bench 20` (scaletrain-bench-memory) and parses it.
MemoryBench measure_memory(const std::string& bench, std::ostream& log);
// Parses nccl-tests output (all_reduce_perf and the like): the columns
// named by its '#' header, each row's size and first (out-of-place) busbw.
// UsageError naming `what` when there is no table or a row has wrong results.
std::vector<BusBw> parse_nccl_tests(const std::string& text, const std::string& what);
// Runs an nccl-tests command line (e.g. "all_reduce_perf -b 1M -e 8G -f 2 -g 8",
// or an mpirun of it across nodes) and parses its table.
std::vector<BusBw> measure_busbw(const std::string& cmd, std::ostream& log);

// A table of the `rates` section, as text: key, one comment line, entries
// ("{m: 256, ...}"); or, with `scalar` set, a key with one value
// ("launch_us: 2.1").
struct RatesTable {
  std::string key, comment;
  std::vector<std::string> entries;
  std::string scalar;
};
// `base_text` (a cluster file) with each table's entries replaced (the
// comment lines just above them, the published table's citation, by the
// table's comment; a table the file lacks is added to `rates`) and its
// `calibrated:` section by `calibrated`; every other line, comments
// included, as it was.
std::string splice_rates(const std::string& base_text, const std::vector<RatesTable>& tables,
                         const std::map<std::string, std::string>& calibrated);
// Loads `base`, measures rates.gemm (measure_gemm: the default grid, then
// `model_shapes`), with `attn_bench`
// rates.attention (measure_attention; with `attn_blocks` its `full` ring-
// block rows too), with `mem_bench` rates.memory and rates.launch_us
// (measure_memory) and, for each nccl-tests command given, busbw_intra /
// busbw_inter (measure_busbw), writes `out`: base's text with the measured
// tables spliced in, so the sources cited in its comments stay.
void calibrate_gpu(const std::string& base, const std::string& out, const std::string& bench,
                   const std::string& command, std::ostream& log,
                   const std::string& nccl_intra = "", const std::string& nccl_inter = "",
                   const std::string& attn_bench = "", const std::string& mem_bench = "",
                   bool attn_blocks = false, const std::vector<GemmShape>& model_shapes = {});

}  // namespace st::plan
