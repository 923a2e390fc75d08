// Glue between the engine and the checkpoint module: which shard of every
// tensor this rank saves (device pointers; the checkpointer snapshots them
// into pinned host buffers, so no host copy of the model exists), the
// scalars that make a resume exact, and restoring a run from any committed
// checkpoint, whatever layout and device wrote it.
//  - Replicated tensors (weights, and moments under ZeRO 0) are split along
//    dim 0 over the replicas (the dp x cp group), so each element is written
//    exactly once and all ranks write in parallel.
//  - Under ZeRO >= 1 each rank saves the master weights and moments it owns:
//    its pieces of the ZeRO partition, which are
//    whole rows of the tensor's tp block and so one hyperslab of the global
//    tensor each, with the tensor's N-D global shape. The loader reads any
//    hyperslab from any set of saved shards (and flat <-> N-D for older
//    checkpoints), so any layout resumes from any other.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/state.hpp"
#include "comm/communicator.hpp"
#include "config/config.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "parallel/grad_buckets.hpp"

namespace st {

struct TrainState {
  std::vector<Param*> params;
  AdamW* opt;
  const Config* cfg;
  int replica, replicas;  // rank and size of the dp x cp group
  int zero_stage = 0;
  int tp_rank = 0;  // replicated (not tp-sharded) tensors are written by tp rank 0
  const GradBuckets* zero = nullptr;  // the ZeRO partition (pieces() <-> optimizer slots)
  // ZeRO 0: each parameter's fp32 master weights (device); under ZeRO >= 1
  // the master of piece k is optimizer slot k's w.
  std::vector<float*> master;
  Device* device = nullptr;  // where all of it lives
  // The dp x cp group on the device (ZeRO 0 resume: each replica reads a
  // share of the rows and the group all-gathers them).
  Communicator* replica_group = nullptr;
};

// Rows [lo, hi) of a replicated tensor's dim 0 that replica r of n writes
// (checkpoint_state splits replicated tensors this way).
std::pair<int64_t, int64_t> replica_rows(int64_t rows, int r, int n);

// The state this rank saves at the end of `step` (views into live tensors;
// save() snapshots them before returning).
CkptState checkpoint_state(const TrainState& s, long step, uint64_t samples_consumed);

// Which committed checkpoint to resume from, per checkpoint.resume: auto
// (newest good one in dir, if any), none, or a path to a step folder or a
// checkpoints folder. Throws UsageError for a PATH that holds no good one.
// Collective over `world`: rank r verifies the rank files i with
// i % world_size == r and the ranks agree on the folder, so a resume reads
// each rank file once across the job, not once per rank. A rank whose share
// of an explicit PATH is bad throws; the caller's start-up agreement stops
// the others.
std::optional<std::string> pick_resume(const CheckpointCfg& c, const std::string& dir,
                                       HostGroup& world);

// Loads weights and moments (this rank's shards of them) and returns the
// step. Replicated state (ZeRO 0) is read in shares: replica r of n reads the
// rows it would write (replica_rows) and the dp x cp group all-gathers the
// rest, so each rank file is read by about one rank, not by every replica.
// Collective over replica_group when it has more than one rank. Returns the
// step the checkpoint was taken at. Throws UsageError when the checkpoint
// belongs to another model shape.
long restore(const TrainState& s, const std::string& step_dir);
}  // namespace st
