// Glue between the engine's state table (optim/state_table.hpp) and the
// checkpoint module: which rows of every piece this rank saves (device
// pointers; the checkpointer snapshots them into pinned host buffers, so no
// host copy of the model exists), the scalars that make a resume exact, and
// restoring a run from any committed checkpoint, whatever layout and device
// wrote it. Each piece is whole rows of its tensor's tp block
// (grad_buckets.hpp places parameters so that every cut falls on a row), so
// it is one hyperslab of the global tensor, with the tensor's N-D shape.
//  - Replicated pieces (ZeRO 0) are split along dim 0 over the replicas
//    (the dp x cp group), so each element is written exactly once and all
//    ranks write in parallel.
//  - Otherwise each rank saves the pieces it holds, and nothing else: the
//    partition's padding is never saved.
// The loader reads any hyperslab from any set of saved shards (and
// flat <-> N-D for older checkpoints), so any layout resumes from any other.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/state.hpp"
#include "comm/communicator.hpp"
#include "config/config.hpp"
#include "optim/state_table.hpp"

namespace st {

// The state this rank saves at the end of `step` (views into live tensors;
// save() snapshots them before returning).
CkptState checkpoint_state(StateTable& t, const Config& cfg, long step, uint64_t samples_consumed);

// Which committed checkpoint to resume from, per checkpoint.resume: auto
// (newest good one in dir, if any), none, or a path to a step folder or a
// checkpoints folder. Throws UsageError for a PATH that holds no good one.
// Collective over `world`: rank r verifies the rank files i with
// i % world_size == r and the ranks agree on the folder, so a resume reads
// each rank file once across the job, not once per rank. A rank whose share
// of an explicit PATH is bad throws; the caller's start-up agreement stops
// the others.
// Rank files are checked before HDF5 parses them (format /3: their metadata's
// CRC32C; the data is checked block by block as restore() reads it). With
// `before_step` >= 0 only older steps are considered (after restore() found
// a damaged block in that one).
std::optional<std::string> pick_resume(const CheckpointCfg& c, const std::string& dir,
                                       HostGroup& world, long before_step = -1);

// Loads the master weights and moments of every piece of `t` and returns the
// step. Replicated pieces are read in shares: replica r of n reads the rows
// it would write (replica_rows) and the dp x cp group all-gathers the rest,
// so each rank file is read by about one rank, not by every replica.
// Collective over t.replica_group when it has more than one rank. Returns the
// step the checkpoint was taken at. Throws UsageError when the checkpoint
// belongs to another model shape, and st::Error (naming file, dataset and
// block) when a block fails its CRC32C: after the fill's collectives, so
// every rank returns and the caller can agree on trying an older step.
long restore(StateTable& t, const Config& cfg, const std::string& step_dir);

// Fills the master weights of every piece of `t` (not the moments) through
// `read`, which fills a batch of views (name "params/NAME", global shape,
// offset, box; host memory) from another source of whole tensors: the
// rows each rank reads, the replicas' shares and their all-gather are those
// of restore(). model.init_from reads a Hugging Face folder through it.
// Collective like restore(); the caller refreshes the compute copies
// (Engine::after_restore).
void init_params(StateTable& t, const std::function<void(std::vector<ShardView>&)>& read);
}  // namespace st
