// The shards one data.path names (a file, a Megatron prefix, a folder or a
// glob) as one stream of ids in name order, memory-mapped. Opening checks
// headers, sidecars and that every shard shares one format and dtype; ids are
// checked as they are read (read() refuses one outside the vocabulary naming
// the file and byte offset), so start-up costs the same for 2 MB or 2 GB.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/formats.hpp"

namespace st {

// The files `path` names, in stream order: a folder's *.bin files (not
// recursive) or a glob's matches other than *.idx and *.json, sorted by name
// (byte order); otherwise `path` itself. Throws UsageError when a folder or
// glob names nothing.
std::vector<std::string> list_shards(const std::string& path, const std::string& key);

class ShardSet {
 public:
  // format: auto|raw|llmc|megatron; raw_dtype: the width of raw files; key:
  // the config key messages name (data.path or data.val_path).
  ShardSet(const std::string& path, const std::string& format, const std::string& raw_dtype,
           int vocab, const std::string& key);
  uint64_t size() const { return total_; }
  const std::string& format() const { return shards_.front().format(); }
  TokType type() const { return shards_.front().type(); }
  const std::vector<Shard>& shards() const { return shards_; }
  // Ids [start, start+count) of the stream (which may cross shards) into out;
  // throws UsageError naming the shard, the byte offset and the valid range
  // for an id outside [0, vocab).
  void read(uint64_t start, int count, int32_t* out) const;
  // data.verify=full: every index entry and every id of every shard, read
  // once in stream order. Throws UsageError naming every bad id with its
  // shard, byte offset and value (the first kMaxListed of them, then how
  // many more), or the first bad index entry.
  void verify() const;
  static constexpr int kMaxListed = 1000;
  std::string describe() const;

 private:
  void check_sidecar(const Shard& s) const;

  std::string path_, key_;
  int vocab_;
  std::vector<Shard> shards_;
  std::vector<uint64_t> begin_;  // first stream index of each shard
  uint64_t total_ = 0;
};

}  // namespace st
