// Glue between the trainer and the checkpoint module: which shard of every
// tensor this rank saves (fp32 master weights and AdamW moments, split along
// dim 0 over the data-parallel ranks so each element is written exactly once
// and all ranks write in parallel), the scalars that make a resume exact, and
// restoring a run from any committed checkpoint, whatever layout wrote it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "config/config.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"

namespace st {

struct TrainState {
  std::vector<Param*> params;
  AdamW* opt;
  const Config* cfg;
  int dp_rank, dp;
};

// The state this rank saves at the end of `step` (views into live tensors;
// save() snapshots them before returning).
CkptState checkpoint_state(const TrainState& s, long step, uint64_t samples_consumed);

// Which committed checkpoint to resume from, per checkpoint.resume: auto
// (newest good one in dir, if any), none, or a path to a step folder or a
// checkpoints folder. Throws UsageError for a PATH that holds no good one.
std::optional<std::string> pick_resume(const CheckpointCfg& c, const std::string& dir);

// Loads weights and moments (full tensors on every dp rank) and returns the
// step the checkpoint was taken at. Throws UsageError when the checkpoint
// belongs to another model shape.
long restore(const TrainState& s, const std::string& step_dir);
}  // namespace st
