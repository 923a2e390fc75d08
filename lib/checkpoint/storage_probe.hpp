// The checkpoint folder's own speed, measured at start so that every
// checkpoint's bandwidth can be reported as a share of it ("x% of the
// disk"): sequential write with fdatasync and cold read (page cache
// bypassed with O_DIRECT, or dropped with posix_fadvise where O_DIRECT is
// refused), by one writer and by one writer per rank of the node at once.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace st {

class MpiCommunicator;

struct StorageProbe {
  std::string dir;
  int writers = 1;           // ranks of this node (the "all" figures' writers)
  int64_t bytes_one = 0;     // bytes the single writer wrote and read
  int64_t bytes_each = 0;    // bytes each of the node's writers wrote and read
  double write_one_Bps = 0;  // one writer, write + fdatasync
  double read_one_Bps = 0;   // one reader, cold
  double write_all_Bps = 0;  // the node's writers at once: their bytes / the slowest one's time
  double read_all_Bps = 0;   // the same, cold reads
  std::string read_method;   // "O_DIRECT" or "fadvise DONTNEED"
  double seconds = 0;        // the probe's own time
  nlohmann::json to_json() const;
  std::string describe() const;  // one log line
};

// Collective over `node` (the ranks of one host; each host probes its own
// disk at the same time as the others, as their checkpoints would write).
// Writes, reads and removes `.storage-probe.rank_<r>.bin` files in `dir`
// (which must exist): `bytes` (at least 4 MiB) by node rank 0 alone, then
// every rank at once, each `bytes` (a split would shrink each rank's share
// into what the caches absorb). With `save_bytes` (what a save writes on
// this rank; -1: unknown) each rank of that phase writes no more than the
// node's largest save per rank, and no less than `bytes` / ranks (1 MiB at
// least): a node of many small ranks probes what its saves write (128 ranks
// of a 0.1 M-parameter model wrote 8 GiB, 17 s of start-up, for saves of
// 0.16 MiB each), never fewer bytes in all than the single writer. Throws
// st::Error naming the file on an I/O error, after every rank's collectives.
StorageProbe probe_storage(const std::string& dir, int64_t bytes, int world_rank,
                           MpiCommunicator& node, int64_t save_bytes = -1);

// The bytes each rank writes in the probe's all-ranks phase (above).
int64_t probe_bytes_each(int64_t bytes, int ranks, int64_t largest_save);

// The probe's write phase alone, collective over `node`: every rank writes
// `bytes_each` and fdatasyncs at once; returns the node's bytes/s (their
// bytes over the slowest rank's time). For a benchmark that pairs each save
// with the disk's rate at that moment on a noisy machine.
double probe_node_write(const std::string& dir, int64_t bytes_each, int world_rank,
                        MpiCommunicator& node);

// Seconds a save of `bytes_per_node` takes at the probed rate (0 when
// not probed).
double expected_write_s(const StorageProbe& p, double bytes_per_node);

}  // namespace st
