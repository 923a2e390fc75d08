// The recordings the planner prices: one rank (dp, cp, tp = 0) of a pipeline
// stage runs one step of the trainer's own Engine on the recording backend
// (lib/record/step.hpp), and the memory model and the step-time model read
// that one record. A step with many micro-batches is recorded with fewer
// (enough that every pipeline schedule reaches its steady state and the
// stage's in-flight micro-batches saturate; the last one, which launches the
// gradient reduction, stays the last), and the time model replays the
// recorded segments over the full schedule. Records are kept per distinct
// shape (the model, the layout, micro-batch, recompute, precision), so the
// memory check and the timing of a layout record each stage once.
#pragma once
#include <memory>
#include <mutex>

#include "config/config.hpp"
#include "plan/ops.hpp"
#include "record/step.hpp"

namespace st::plan {

struct Timeline;  // step_time.cpp's view of the record, built once

struct StageRecord {
  int stage = 0;
  int micro = 0;  // micro-batches recorded (<= train.grad_accum)
  record::RankStep step;
  mutable std::once_flag once;
  mutable std::shared_ptr<const Timeline> timeline;
};

// Micro-batches to record for cfg: grad_accum, or fewer that give the same
// memory peak and the same segments (see above).
int recorded_micro(const Config& cfg);
// The record of pipeline stage `stage` of cfg (resolved and valid) with
// `micro` micro-batches (0: recorded_micro(cfg)); cached.
std::shared_ptr<const StageRecord> stage_record(const Config& cfg, int stage, int micro = 0);

// The stage whose record stands for stage `stage` of cfg's pipeline in the
// step-time replay and the worst-stage memory: the first and the last stand
// for themselves, a middle stage for the first middle stage whose model
// chunks have the same layer counts (the same shapes; a later middle stage
// keeps no more micro-batches in flight under 1F1B and interleaving). With
// the even split that is stage 1 for every middle one; an uneven split
// (parallel.pipeline_layers) adds one record per distinct shape.
int stand_in_stage(const Config& cfg, int stage);

// A recorded kernel call as the pricing type: its kind and the shape a CPU
// cluster file's table is keyed by. A ring-attention block [Tq, Tk] becomes
// the causal op of Tq queries with cp = 2 Tk / Tq (the same FLOPs as the
// whole block; pricing by rates counts the half the zig-zag split leaves
// unmasked, rates.hpp attention_price);
// the byte counts of copies and fills as elements of the cluster's dtype.
Op kernel_op(const record::KernelCall& k);
// The allocations made before a kernel call (elements of 4 bytes, the CPU
// device zeroing them), and a device copy or fill, as priced ops (elements
// of 2 bytes on a GPU cluster, 4 on a CPU one).
Op alloc_op(int64_t bytes);
Op copy_op(const record::CopyCall& c, bool gpu);
// Every op one step of cfg prices on a CPU cluster (every stage's recorded
// rank: kernel calls, allocations, copies): what `scaletrain-plan
// calibrate` times.
std::vector<Op> step_ops(const Config& cfg);

}  // namespace st::plan
