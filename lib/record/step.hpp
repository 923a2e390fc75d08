// One training step of one rank, run by the trainer's own Engine and Model
// on the recording backend (record.hpp): the mesh's groups are recording
// ones, the data are constant tokens of the configured shape (no data file is
// read), and the step is the trainer's: forward and backward of every
// micro-batch and pipeline slot, the gradient reduction, the norm and the
// optimizer update. What it returns is what that rank's device would hold and
// run: bytes by category after set-up and their peaks during the step (and
// where the peak fell), every kernel call and every collective. --dry-run
// prints it; the planner is to price it (docs/planner.md).
#pragma once
#include <vector>

#include "config/config.hpp"
#include "parallel/stages.hpp"
#include "record/record.hpp"

namespace st::record {

struct RankStep {
  int rank = 0;
  MeshCoords at;
  MemoryStats setup;  // live bytes once the engine is built (weights, masters, moments)
  MemoryStats step;   // live bytes at the step's end, and the step's peaks
  PeakAt peak;        // where the step's total peaked (phase "micro-batch k forward": the op)
  std::vector<KernelCall> kernels;
  std::vector<CollCall> collectives;
  std::vector<CopyCall> copies;
  std::vector<Item> items;  // the step's timeline (record.hpp)
  std::vector<std::string> streams;
  // Segments of the timeline, one per op of the stage's pipeline_schedule
  // (parallel/pipeline.hpp; pp == 1: the forward and the backward of each
  // micro-batch), each from the op's start to its end (its send issued).
  // Items outside every segment (-1) are the step's start (before the
  // first) and its end (after the last: the gradient reductions' waits, the
  // norm, the loss, the optimizer). Items tagged edge are the first and last
  // stages' own work (embedding, head, loss).
  int segments = 0;
};

// cfg resolved (parallel.dp set) and valid; rank in [0, world).
RankStep record_step(const Config& cfg, int rank);

}  // namespace st::record
