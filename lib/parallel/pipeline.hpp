// Pipeline schedules: the order in which one stage runs the forward and
// backward passes of grad_accum micro-batches. 1F1B (PipeDream-flush,
// Megatron's default): pp - stage - 1 warm-up forwards, then one forward and
// one backward in turn, then the remaining backwards, so a stage never keeps
// more than pp - stage micro-batches in flight. Interleaved (num_model_chunks
// v > 1, Megatron's virtual pipeline): the stage holds v model chunks and
// walks micro-batches in groups of pp per chunk, which shrinks the bubble by
// v. Pure functions: the engine executes the ops (lib/engine/engine_pipeline.cpp).
#pragma once
#include <vector>

namespace st {

struct PipeOp {
  bool forward;
  int micro;  // 0..grad_accum-1
  int chunk;  // 0..v-1 (model chunk on this stage)
};

// The ops of pipeline stage `stage` of `pp` with `chunks` model chunks and
// `micro` micro-batches (chunks > 1 needs micro % pp == 0).
std::vector<PipeOp> pipeline_schedule(int pp, int chunks, int micro, int stage);
}  // namespace st
