// The token file formats users already have (docs/data.md): raw little-endian
// ids (nanoGPT's .bin, scaletrain-tokenize's default), llm.c shards (a header
// of 256 int32 then the ids) and Megatron-LM indexed datasets (PREFIX.idx +
// PREFIX.bin). Opening a shard reads and checks its header only (a Megatron
// index: its header and the O(1) facts of its ends), never its tokens or
// the index's per-sequence arrays, so start-up does not grow with the
// corpus; ids, and the index entries of the sequences they fall in, are
// checked as the sampler reads them (data.cpp), or all at once with
// data.verify=full (verify()).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace st {

// The element type of the ids in a shard's token region.
enum class TokType { kU8, kI8, kU16, kI16, kU32, kI32, kI64 };
const char* tok_type_name(TokType t);
int tok_type_width(TokType t);

// The magics and versions llm.c's writer (dev/data/data_common.py) puts in
// header[0] and header[1].
constexpr int32_t kLlmcMagicU16 = 20240520, kLlmcVersionU16 = 1;
constexpr int32_t kLlmcMagicU32 = 20240801, kLlmcVersionU32 = 7;
constexpr int kLlmcHeaderInts = 256;
// Megatron-LM's .idx magic (megatron/core/datasets/indexed_dataset.py).
constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

// One memory-mapped token file: the ids are `n` elements of `type` starting
// `data_offset` bytes into `path`.
class Shard {
 public:
  // format: auto|raw|llmc|megatron; raw_dtype (uint16|uint32) is the width of
  // a raw file. `path` may be a Megatron prefix, its .bin or its .idx.
  // Throws UsageError naming the file (and the byte offset) on a bad header.
  // `key` names the config key in messages (data.path or data.val_path).
  static Shard open(const std::string& path, const std::string& format,
                    const std::string& raw_dtype, const std::string& key = "data.path");
  Shard() = default;
  Shard(Shard&& o) noexcept { *this = std::move(o); }
  Shard& operator=(Shard&& o) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard();

  const std::string& path() const { return path_; }  // the file holding the ids
  // The Megatron index of this shard ("" for other formats).
  const std::string& index_path() const { return idx_path_; }
  const std::string& format() const { return format_; }
  TokType type() const { return type_; }
  uint64_t size() const { return n_; }
  uint64_t data_offset() const { return data_offset_; }
  // Megatron: checks the index entries (length, byte pointer) of every
  // sequence holding ids [first, first+count): each starts where the one
  // before it ended (the writer's back-to-back layout), found by a binary
  // search of the mapped pointers; throws UsageError naming the index and the
  // byte offset of the bad entry. Nothing for the other formats.
  void check_index(uint64_t first, uint64_t count) const;
  // Megatron: every index entry (the sequences and the document indices),
  // as check_index for all of them; throws the first bad one.
  void check_whole_index() const;
  // Id `i` (0 <= i < size()) as a signed 64-bit value (signed Megatron types
  // may hold negative values, which the range check refuses).
  int64_t at(uint64_t i) const {
    const unsigned char* p = base_ + data_offset_ + i * uint64_t(width_);
    switch (type_) {
      case TokType::kU8:
        return *p;
      case TokType::kI8:
        return load<int8_t>(p);
      case TokType::kU16:
        return load<uint16_t>(p);
      case TokType::kI16:
        return load<int16_t>(p);
      case TokType::kU32:
        return load<uint32_t>(p);
      case TokType::kI32:
        return load<int32_t>(p);
      case TokType::kI64:
        return load<int64_t>(p);
    }
    return 0;
  }

 private:
  template <class T>
  static int64_t load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return int64_t(v);
  }
  void map(const std::string& file, uint64_t bytes);
  // open() by format, each checking its own header.
  static Shard open_megatron(const std::string& path, const std::optional<std::string>& prefix,
                             const std::string& key);
  static Shard open_llmc(const std::string& path, const std::string& key);
  static Shard open_raw(const std::string& path, const std::string& raw_dtype,
                        const std::string& key);
  uint64_t check_index_ends() const;  // the index's O(1) checks; the .bin's expected size
  // The Megatron index's arrays, read from the mapped .idx.
  int32_t seq_len(uint64_t i) const;
  int64_t seq_ptr(uint64_t i) const;
  int64_t doc_index(uint64_t i) const;
  void check_seq(uint64_t i) const;  // sequence i starts where i-1 ended

  std::string path_, format_;
  TokType type_ = TokType::kU16;
  int width_ = 2;
  uint64_t data_offset_ = 0, n_ = 0;
  const unsigned char* base_ = nullptr;
  size_t map_bytes_ = 0;
  // Megatron: the mapped .idx and its counts (sequences, document indices).
  std::string idx_path_, key_;  // key_: the config key messages name
  const unsigned char* idx_ = nullptr;
  size_t idx_bytes_ = 0;
  uint64_t seqs_ = 0, docs_ = 0;
};

}  // namespace st
