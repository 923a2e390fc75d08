// Public API of the checkpoint module: asynchronous HDF5 save of a rank's
// sharded state with an all-ranks commit vote, and load under another parallel
// layout (resharding through hyperslabs). File format: docs/checkpoint-format.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/state.hpp"

namespace st {

class MpiCommunicator;

class TelemetryWriter;

enum class CkptMode { kAsync, kSync };
enum class CkptOnError { kContinue, kAbort };

struct CheckpointOptions {
  std::string dir;  // checkpoints folder; created if missing
  CkptMode mode = CkptMode::kAsync;
  int keep_last_n = 3;  // <= 0 keeps all; the newest committed is never deleted
  CkptOnError on_error = CkptOnError::kContinue;
  double timeout_s = 600;  // bound on each vote/commit exchange between ranks
  nlohmann::json layout = nlohmann::json::object();  // mesh/layout recorded in index.json
  // The storage probe's write bandwidth of this rank's node with one writer
  // per rank of the node (bytes/s, 0: not probed; storage_probe.hpp): each
  // commit reports its node's write bandwidth as a share of it.
  double disk_write_Bps = 0;
  // Test hook, called on the thread doing the work at these phases:
  // "dataset" (after each dataset is written), "written" (rank file written and
  // fsynced, before the vote), "folder_synced" (one rank per host, once every
  // rank's file is written: the step folder fsynced, before rank 0 may
  // commit), "index_written" (rank 0, before the rename),
  // "renamed" (rank 0, before `latest` moves). Leave empty in production.
  std::function<void(const std::string& phase, long step)> test_hook;
};

// What save() cost the training loop.
struct SaveStats {
  double stall_s = 0;  // everything the loop waited for (wait_prev + snapshot [+ write in sync])
  double wait_prev_s = 0;  // waiting for the previous background save
  double snapshot_s = 0;   // copying shards into the host buffers
  int64_t bytes = 0;       // bytes of tensor data this rank snapshots
  bool committed = false;  // sync / emergency only: the step was committed
};

// Result of the most recent finished save (see Checkpointer::last_outcome).
struct SaveOutcome {
  long step = -1;
  bool committed = false;
  std::string error;  // empty when committed
  std::string path;   // committed step folder
  double write_s = 0;
  int64_t bytes = 0;
  double file_s = 0;  // this rank's file, mkdir to fsync (before the vote)
  nlohmann::json phases = nlohmann::json::object();  // this rank's phases_s
};

class Checkpointer {
 public:
  // Collective over `world`. Duplicates `world` for its own vote traffic and
  // removes stale step_*.tmp folders (rank 0). `tel` may be null.
  Checkpointer(const MpiCommunicator& world, const CheckpointOptions& o, TelemetryWriter* tel);
  ~Checkpointer();  // finalize(), errors logged, never thrown
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. Snapshots `s` (the caller may modify it as soon as this
  // returns) and writes it in the background (async) or before returning (sync).
  // Throws UsageError on malformed shards, and Error when on_error=abort and
  // this or the previous save failed.
  SaveStats save(long step, const CkptState& s);
  // Not collective, optional, before the first save: allocates and touches
  // the snapshot buffers for `s`'s shards and starts HDF5, so that the first
  // save pays no first-touch page faults or library start (a start-up cost;
  // docs/checkpoint-format.md, "The first save"). Returns the seconds taken.
  double prepare(const CkptState& s);
  // Collective. Synchronous save regardless of mode, for the signal path (the
  // app sets a flag in its handler and calls this from the main loop).
  SaveStats emergency_save(long step, const CkptState& s);
  // Collective. Waits for the background save (and, without MPI_THREAD_MULTIPLE,
  // runs its vote). Throws like save() under on_error=abort.
  void wait();
  void finalize();  // wait(); then no more saves

  SaveOutcome last_outcome() const;
  bool vote_on_writer_thread() const { return threaded_vote_; }

  struct Job;  // one save in flight (internal)

 private:
  SaveStats save_impl(long step, const CkptState& s, bool sync);
  void snapshot(const CkptState& s, Job& j, SaveStats& st);  // into bufs_, widened
  void wait_prev();  // joins the writer and finishes its vote if deferred
  void finish(Job& j);
  std::string vote(Job& j);
  std::string commit(Job& j, const std::vector<std::string>& lists, int* decision);
  void raise_if_failed();
  void node_bandwidth(const std::vector<nlohmann::json>& ranks, Job& j);
  void log_commit(const Job& j, double write_s) const;

  std::unique_ptr<MpiCommunicator> comm_;  // private: the vote's message order
  int rank_ = 0, size_ = 1;
  bool threaded_vote_ = true;
  bool host_leader_ = true;  // the lowest rank of its host: fsyncs the step folder
  int host_id_ = 0;          // the lowest world rank of this rank's host
  bool broken_ = false;      // a vote timed out: the private communicator is unusable
  bool finalized_ = false;
  CheckpointOptions opt_;
  TelemetryWriter* tel_ = nullptr;
  struct HostBuf;                               // a snapshot buffer (pinned on a device)
  std::vector<std::unique_ptr<HostBuf>> bufs_;  // reused across saves
  std::unique_ptr<Job> job_;
  mutable std::mutex mu_;  // guards last_ and pending_error_ (the writer thread sets them)
  SaveOutcome last_;
  std::string pending_error_;  // on_error=abort: thrown at the next save()/wait()
};

// ---- loading ----------------------------------------------------------------

struct VerifyOptions {
  // Compare every rank file's bytes with index.json before HDF5 opens it.
  // false: compare sizes only, and let HDF5 parse the bytes unchecked (for
  // files known to be intact).
  bool checksums = true;
  // With checksums: read every rank file whole against its CRC32C. false
  // (format /3 only): check the metadata's CRC32C (KiB per file) and leave
  // the data to load(), which checks every CRC block it reads; a /2 file is
  // read whole regardless (its metadata has no CRC of its own).
  bool data = true;
  long before_step = -1;     // find_latest_good: only steps older than this (-1: all)
  int part = 0, nparts = 1;  // verify only rank files with index % nparts == part
  // Set when every rank of a job verifies its part (part = rank, nparts =
  // ranks): a collective that returns whether every part was good, so that
  // all ranks pick the same step folder while each reads only its share of
  // the rank files (O(1) files per rank instead of all of them on each).
  std::function<bool(bool)> all_good;
};

// Checks one committed step folder: index.json (read_index), every rank
// file's size and (checksums) CRC32C before HDF5 parses it, its binding to
// the index, every dataset with the indexed shape and checksum attribute,
// and the per-rank meta blobs. Returns "" when good, else the reason naming
// the file (and dataset).
std::string verify_checkpoint(const std::string& step_dir, const VerifyOptions& o = {});

// Newest committed step folder under `dir` that verifies, as a full path.
// Skips *.tmp folders; each skipped folder is logged (and appended to
// `rejected`, "path: reason"). `latest` is read and reported when it disagrees.
// With o.all_good every rank must call it (same dir): a folder counts as
// good when every rank's part verified.
std::optional<std::string> find_latest_good(const std::string& dir, const VerifyOptions& o = {},
                                            std::vector<std::string>* rejected = nullptr);

struct LoadResult {
  long step = -1;
  std::string path;
  int saved_world_size = 0;
  nlohmann::json layout;        // as saved
  nlohmann::json scalars;       // rank 0's scalars (index.json)
  nlohmann::json rank_scalars;  // scalars of `rank` below (null if none)
  std::vector<uint8_t> rng;     // RNG bytes of `rank` below (empty if none)
  int64_t bytes_read = 0;       // tensor bytes copied into the wanted shards
  int64_t bytes_from_disk = 0;  // format /3: whole CRC blocks read and verified (>= bytes_read)
  int datasets_verified = 0;    // whole datasets read and checksummed during this load
  double seconds = 0;
};

// Fills each wanted shard (name, global_shape, offset, shape in the NEW layout;
// data points at the destination) by reading exactly the overlapping
// hyperslabs of the saved shards. A tensor saved with a 1-D (flat) global shape
// may be requested N-D and vice versa when the element counts agree. Per-rank
// scalars and rng are returned for saved rank `rank` (-1: none). Throws Error
// naming file and dataset on any failure, UsageError on an unknown tensor or
// incomplete coverage.
LoadResult load(const std::string& step_dir, std::vector<ShardView>& want, int rank = -1);

// Committed step folders (step_N, no suffix) under `dir`, newest first.
std::vector<std::pair<long, std::string>> committed_steps(const std::string& dir);

// Start-up check on every rank, before the first step: `dir` can be created
// and this rank can write in it; and a run that does not resume (`resuming`
// false: checkpoint.resume=none, or auto that found nothing loadable) finds
// no committed step there that its saves would write over. Returns "" or the
// reason, naming the folder and what to change.
std::string check_checkpoint_dir(const std::string& dir, bool resuming, int rank);

// "step_00000042" for 42; parse_step_dir returns -1 for anything else.
std::string step_dir_name(long step);
long parse_step_dir(const std::string& name);

}  // namespace st
