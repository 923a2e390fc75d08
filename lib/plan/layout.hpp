// Layout arithmetic the planner and the trainer's --dry-run share, with no
// MPI: the layers a pipeline stage holds, the parameters one rank of a stage
// holds (its tensor-parallel share, block by block), the shapes one rank sees
// per micro-batch, and how many micro-batch chunks a stage keeps in flight
// under 1F1B and interleaved schedules. The trainer's own versions live in
// lib/parallel (mesh.cpp, pipeline.cpp), which links MPI; ctest/plan checks
// that these agree with them for every shape it tries.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace st::plan {

// Layers [first, last) of each model chunk of pipeline stage `stage`
// (chunk c holds global chunk c*pp + stage, n_layers / (pp*chunks) layers).
std::vector<std::pair<int, int>> stage_layer_ranges(int n_layers, int pp, int chunks, int stage);

// Local (per-rank) sizes of one micro-batch under cfg's layout, in elements:
// N = micro_batch * seq_len / cp token rows, Ns = N / tp under sp (the
// residual stream rows), heads, widths and vocabulary divided by tp.
struct MicroDims {
  int64_t B = 0, T = 0, N = 0, Ns = 0;
  int64_t d = 0, hd = 0, Hq = 0, Hkv = 0, qd = 0, kd = 0, F = 0, V = 0;
};
MicroDims micro_dims(const Config& cfg);

// What one rank of pipeline stage `stage` holds (tp share).
struct StageShape {
  int stage = 0;
  std::vector<std::pair<int, int>> chunks;    // layer ranges, one per model chunk
  int layers = 0;                             // blocks held, over all chunks
  bool first = false, last = false;           // holds the embedding / the head
  int64_t block_params = 0;                   // one block (tp share)
  int64_t embed_params = 0, head_params = 0;  // 0 when not held
  int64_t params = 0;                         // all of the above
};
StageShape stage_shape(const Config& cfg, int stage);
// Whole-model parameter count (the trainer's count_params).
int64_t model_params(const ModelCfg& m);

// The gradient buckets of one rank of a stage as lib/parallel/grad_buckets.cpp
// forms them: parameters in the trainer's order (per chunk: embedding, the
// nine tensors of each block, final norm and head), filled in reverse up to
// parallel.dp_bucket_mb (under ZeRO 3 also closed at a layer change).
struct StageParam {
  double n = 0;   // elements (tp share)
  int layer = 0;  // -1 embedding, 0..n_layers-1 blocks, n_layers final norm + head
  int chunk = 0;
};
std::vector<StageParam> stage_params(const Config& cfg, const StageShape& s);
struct GradBucket {
  double n = 0;   // elements
  int first = 0;  // index in stage_params of its earliest parameter (the last to be ready)
};
std::vector<GradBucket> grad_buckets(const Config& cfg, const std::vector<StageParam>& params);

// One op of a pipeline stage's schedule: the forward or backward of one
// micro-batch of one model chunk (the unit a stage keeps in flight between
// the two). The same order as lib/parallel/pipeline.cpp's
// pipeline_schedule (1F1B for chunks == 1, Megatron's interleaved order
// otherwise); pp == 1 is forward then backward of each micro-batch.
struct PipeStep {
  bool forward = true;
  int micro = 0, chunk = 0;
};
std::vector<PipeStep> pipeline_ops(int pp, int chunks, int micro, int stage);

}  // namespace st::plan
