// Internal: one rank's HDF5 file in a step folder (rank_NNNNN.h5) and the
// names shared by writer, index and loader. Format: docs/checkpoint-format.md.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace st::ckpt {

// /2: index.json carries each rank file's size and CRC32C (checked before
// HDF5 parses the file). /1 indexes had neither and are refused by name.
inline constexpr const char* kFormat = "scaletrain.checkpoint/2";
inline constexpr const char* kFormatV1 = "scaletrain.checkpoint/1";
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

// Where write_rank_file spent its time (seconds), for the ckpt_commit event.
struct RankFileTimes {
  double create_s = 0;    // H5Fcreate and the file attributes
  double datasets_s = 0;  // every dataset: create, checksum, write, attributes
  double close_s = 0;     // H5Fflush and H5Fclose
  double fsync_s = 0;     // fsync of the closed file
};

// Writes `path` (must not exist), closes and fsyncs it. Returns this rank's
// index entries: [{name, global_shape, offset, shape, checksum}], and adds the
// tensor bytes written to `bytes`. `hook("dataset")` runs after each dataset.
// `times`, when given, receives the phases' durations.
nlohmann::json write_rank_file(const std::string& path, long step, int rank, int world,
                               const std::vector<ShardOut>& shards, const std::string& scalars,
                               const std::vector<uint8_t>& rng, int64_t& bytes,
                               const std::function<void(const std::string&)>& hook,
                               RankFileTimes* times = nullptr);

void fsync_path(const std::string& path);  // throws Error naming the file

// Renames an existing step folder to the first free `<step_dir>.replaced-N`
// (a name the loader and retention never touch) and returns that path.
std::string keep_aside(const std::string& step_dir);

}  // namespace st::ckpt
