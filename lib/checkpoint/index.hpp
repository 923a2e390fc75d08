// Internal: builds and checks index.json (rank 0, at commit) from every
// rank's shard entries, and reads it back into typed structs, checked field
// by field (index_read.cpp). Format: docs/checkpoint-format.md.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace st::ckpt {

// `ranks[r]` = {"rank", "file", "bytes", "shards": [...]} as gathered from rank r.
// Throws Error naming the tensor when shards disagree on the global shape or
// do not cover it exactly once (replicas with identical box and checksum are
// kept once, from the lowest rank).
nlohmann::json build_index(const std::vector<nlohmann::json>& ranks, long step,
                           const nlohmann::json& layout, const nlohmann::json& scalars);

int64_t numel(const std::vector<int64_t>& shape);

using Dims = std::vector<int64_t>;

struct IndexShard {
  std::string file;  // one of Index::files
  int rank = 0;      // the rank that wrote `file`
  Dims offset, shape;
  uint32_t checksum = 0;
  // Format /3 (empty / 0 in /2): where the shard's bytes start in `file`
  // and the CRC32C of each IndexRankFile::block_bytes of them.
  uint64_t file_offset = 0;
  std::vector<uint32_t> block_crcs;
};
struct IndexTensor {
  Dims global_shape;
  std::vector<IndexShard> shards;
};
struct IndexRankFile {
  int rank = 0;
  std::string file;          // always rank_file_name(rank)
  int64_t bytes = 0;         // tensor bytes in it
  int64_t file_bytes = 0;    // the file's size
  uint32_t file_crc = 0;     // CRC32C of the whole file
  uint32_t meta_crc = 0;     // /3: CRC32C of the bytes outside every shard's data
  uint64_t block_bytes = 0;  // /3: bytes per data CRC block (0 in /2)
  // /3: every dataset's data as (offset, bytes), sorted, disjoint, inside
  // the file: what meta_crc leaves out (replicas the index lists once included).
  std::vector<std::pair<uint64_t, uint64_t>> extents;
};
struct Index {
  std::string path;  // .../index.json, for messages
  int version = 3;   // 2 or 3 (scaletrain.checkpoint/N)
  long step = 0;
  int world_size = 0;
  nlohmann::json layout = nlohmann::json::object();
  nlohmann::json scalars = nlohmann::json::object();
  std::vector<IndexRankFile> files;  // one per rank
  std::map<std::string, IndexTensor> tensors;
};

// Reads <step_dir>/index.json and checks every field's type and range, every
// shard's box against its tensor, file names against ranks, and `step`
// against the folder name (step_N). Throws UsageError naming the file and
// the field (and the value found) on the first problem.
Index read_index(const std::string& step_dir);

}  // namespace st::ckpt
