// Internal: one rank's HDF5 file in a step folder (rank_NNNNN.h5) and the
// names shared by writer, index and loader. Format: docs/checkpoint-format.md.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/phase_clock.hpp"

namespace st::ckpt {

// /3: index.json also carries, per rank file, the CRC32C of its HDF5
// metadata (every byte outside the data extents) and, per shard, where its
// data starts in the file and the CRC32C of each `kCrcBlock` of it, so a
// restore checks the metadata (KiB) before HDF5 parses the file and each
// data block as it reads it: every byte read once. /2 (whole-file size and
// CRC32C only) is still read; /1 indexes had neither and are refused by name.
inline constexpr const char* kFormat = "scaletrain.checkpoint/3";
inline constexpr const char* kFormatV2 = "scaletrain.checkpoint/2";
inline constexpr const char* kFormatV1 = "scaletrain.checkpoint/1";
// Bytes per data CRC block (the last block of a shard may be shorter),
// recorded in index.json as each file's `block_bytes`.
inline constexpr uint64_t kCrcBlock = uint64_t(4) << 20;
inline constexpr const char* kScalarsDataset = "_meta/scalars.json";
inline constexpr const char* kRngDataset = "_meta/rng";

std::string rank_file_name(int rank);  // rank_00003.h5

// A shard ready to write: metadata plus a pointer to its snapshot.
struct ShardOut {
  std::string name;
  std::vector<int64_t> global_shape, offset, shape;
  const float* data = nullptr;
  int64_t numel() const;
};

// What write_rank_file wrote.
struct RankFileOut {
  // [{name, global_shape, offset, shape, checksum, file_offset, block_crc32c}]
  nlohmann::json entries = nlohmann::json::array();
  int64_t bytes = 0;       // tensor bytes written
  int64_t file_bytes = 0;  // the file's size and CRC32C (index.json's file_bytes, file_crc32c)
  uint32_t file_crc = 0;
  uint32_t meta_crc = 0;  // CRC32C of the bytes outside the data extents (meta_crc32c)
  // [[file offset, bytes], ...] of every dataset's data in file order,
  // replicas included (index.json's data_extents: what meta_crc leaves out).
  nlohmann::json extents = nlohmann::json::array();
  // Where the write spent its time, for the ckpt_commit event's phases, in
  // order: h5_create (H5Fcreate and the file attributes), h5_datasets (every
  // dataset's metadata: create, storage allocated, attributes), data (the
  // bytes: checksummed and written in one pass, large pwrites), h5_close
  // (checksum attributes, meta blobs, H5Fflush and H5Fclose), crc (the
  // file's CRC32C: the data's combined, HDF5's metadata read back), fsync.
  std::vector<PhaseTime> phases;
};

// How the writer lays out and writes the file: what the checkpoint
// benchmark (scaletrain-bench-checkpoint) varies; the defaults are its
// choice on the machines measured (docs/checkpoint-format.md, "Writing at
// the storage's speed"). Not a config key: a setting of the format's writer.
struct WriteTuning {
  uint64_t align = uint64_t(1) << 20;  // H5Pset_alignment: datasets of >= align_threshold bytes
  uint64_t align_threshold = uint64_t(1) << 20;  // start at a multiple of `align` (0: no alignment)
  size_t block = size_t(4) << 20;                // bytes checksummed, then written, per pwrite
  size_t writeback = size_t(32) << 20;  // sync_file_range(WRITE) after this many bytes (0: never)
  uint64_t meta_block = 0;              // H5Pset_meta_block_size (0: HDF5's 2 KiB)
  // O_DIRECT for each dataset's 4 KiB-aligned body (the tail, and any file
  // system that refuses O_DIRECT, buffered): no copy into the page cache.
  bool direct = false;
  // The writer before issue 53, for the benchmark's before/after: H5Dwrite
  // per dataset (checksummed first, from memory), then the closed file read
  // back for its CRC32C.
  bool h5_write = false;
};
WriteTuning& write_tuning();  // process-wide, read at each write_rank_file

// Writes `path` (must not exist), closes and fsyncs it once. Every shard is
// a contiguous dataset whose storage HDF5 allocates at creation; its bytes
// are then checksummed and written in one pass by large sequential pwrites
// (never read back), and the file's CRC32C is assembled from the pieces'
// (only HDF5's own metadata, a few KiB, is read back). `hook("dataset")`
// runs after each dataset is written.
RankFileOut write_rank_file(const std::string& path, long step, int rank, int world,
                            const std::vector<ShardOut>& shards, const std::string& scalars,
                            const std::vector<uint8_t>& rng,
                            const std::function<void(const std::string&)>& hook);

void fsync_path(const std::string& path);  // throws Error naming the file

// Renames an existing step folder to the first free `<step_dir>.replaced-N`
// (a name the loader and retention never touch) and returns that path.
std::string keep_aside(const std::string& step_dir);

}  // namespace st::ckpt
