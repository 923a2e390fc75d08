// The checkpoint folder's speed at start (checkpoint.probe_mb): the storage
// probe on every node, its figures in run.json `storage` and the log, and
// the warning when checkpoint.interval cannot hide a save's write.
#pragma once
#include <string>

namespace st {

struct Job;

// Collective over the world (each node's ranks probe together). Returns the
// probed write bandwidth of this rank's node with one writer per rank
// (bytes/s; 0 when checkpoints or the probe are off, or it failed: logged).
// Sets j.ckpt_write_expect_s, the time the probed rate needs for a save.
double probe_checkpoint_storage(Job& j, const std::string& ckpt_dir);

// At the first interval's save, with the measured step time: warns (rank 0)
// when `interval` steps take less than the save's expected write, so the
// next save waits for this one. `loop_s` covers `steps` steps.
void warn_if_write_not_hidden(const Job& j, long steps, double loop_s);

}  // namespace st
