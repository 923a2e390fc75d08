// The safetensors file format (Hugging Face), read and written from its
// specification: an 8-byte little-endian header length N, N bytes of UTF-8
// JSON ({NAME: {"dtype", "shape", "data_offsets": [BEGIN, END]}, ...,
// optionally "__metadata__": {string: string}}), then the byte buffer.
// Offsets count from the start of the buffer; tensors are row-major and
// little-endian and fill the buffer without gaps or overlaps. A reader
// checks all of it before a byte of tensor data is used (docs/convert.md).
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace st::safetensors {

struct TensorInfo {
  std::string dtype;            // "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;   // may be empty (a scalar)
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
};

// Bytes per element of a safetensors dtype; 0 for a name the format does not define.
size_t dtype_bytes(const std::string& dtype);

// A safetensors file, memory-mapped read-only, its header checked. Throws
// UsageError naming the file and what is wrong (truncated, a bad header, an
// entry whose offsets disagree with its dtype and shape, gaps or overlaps).
class File {
 public:
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  const TensorInfo* find(const std::string& name) const;  // null if absent
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The first byte of a tensor's data.
  const uint8_t* data(const TensorInfo& t) const { return buffer_ + t.begin; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* buffer_ = nullptr;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Widens n elements of `dtype` (F32, BF16 or F16) at `src` to fp32.
void to_f32(const std::string& dtype, const uint8_t* src, float* dst, int64_t n);

struct OutTensor {
  std::string name;
  std::string dtype;  // F32 or BF16
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype_bytes bytes, little-endian
};

// The header a file of these tensors gets (padded with spaces to a multiple
// of 8 bytes, as Hugging Face's writer does), with its data offsets.
std::string header_json(const std::vector<OutTensor>& tensors,
                        const std::map<std::string, std::string>& metadata);
// Writes a safetensors file. Throws Error naming the path on an I/O failure.
void write(const std::string& path, const std::vector<OutTensor>& tensors,
           const std::map<std::string, std::string>& metadata);

// The same, one tensor at a time (an export holds one weight in memory, not
// a whole shard): the header first (the tensors' `data` unused), then each
// tensor's bytes in order through append(), then close().
class Writer {
 public:
  Writer(const std::string& path, const std::vector<OutTensor>& tensors,
         const std::map<std::string, std::string>& metadata);
  ~Writer();
  void append(const void* data, size_t bytes);  // the next tensor, whole
  void close();                                 // all tensors appended; flushed

 private:
  std::string path_;
  std::vector<uint64_t> sizes_;
  size_t next_ = 0;
  std::FILE* f_ = nullptr;
};

}  // namespace st::safetensors
