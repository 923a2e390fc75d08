// Internal: the restore's read path for format /3 rank files, beside HDF5.
// The file's metadata (every byte outside its data extents, KiB) is checked
// against index.json before any HDF5 call parses it; the data a load needs is
// then read in whole CRC blocks by large preads (O_DIRECT where the file
// system takes it: no page-cache copy, cold at the device's rate), two reads
// in flight on two reader threads while the caller's thread verifies each block
// against its CRC32C and copies the wanted bytes straight to their
// destinations. Every byte is read from the disk once, then checksummed and
// copied a cache-sized stretch at a time, so it crosses the memory bus once
// more. docs/checkpoint-format.md, "Restoring cold".
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/index.hpp"

namespace st::ckpt {

// CRC32C of bytes [a, b) of open file `fd`, continuing `crc`: runs the
// file system reports as holes (alignment padding never written) are zeros,
// checksummed without reading them; the rest is read through `buf`.
uint32_t crc32c_range(int fd, uint64_t a, uint64_t b, uint32_t crc, std::vector<char>& buf,
                      const std::string& path);

// CRC32C of every byte of `path` (`size` bytes) outside `extents` (sorted,
// disjoint), in file order; holes count as zeros without being read.
// Throws Error naming the file when it cannot be read.
uint32_t meta_crc32c(const std::string& path, uint64_t size,
                     const std::vector<std::pair<uint64_t, uint64_t>>& extents);

// `len` bytes of a shard's data from byte `src` of it, to `dst`.
struct Copy {
  uint64_t src = 0, len = 0;
  char* dst = nullptr;
};

// What to read of one saved shard: copies out of it (any order, may span
// blocks), or with `all` every block verified and nothing copied.
struct ShardRead {
  const IndexShard* shard = nullptr;
  std::string dataset;  // the tensor's name, for messages
  std::vector<Copy> copies;
  bool all = false;
};

// Reads every block of `path` that `reads` touch, once each in file order,
// checks it against its CRC32C and does the copies. Throws Error naming
// the dataset, the block and its bytes on a mismatch (the caller adds the
// file). Returns the bytes read from the file.
int64_t read_shards(const std::string& path, uint64_t block_bytes,
                    const std::vector<ShardRead>& reads);

}  // namespace st::ckpt
