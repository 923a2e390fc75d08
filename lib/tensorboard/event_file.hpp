// One TensorBoard event file: events.out.tfevents.<time>.<host>.<pid> in a
// folder, opened with the file-version record, then one record per
// telemetry record's scalars (scalars.hpp). Records are TFRecord-framed (a
// uint64 length, the masked CRC32C of the length, the serialized Event, the
// masked CRC32C of the Event), each handed to the kernel with write(2) as it
// is made, so TensorBoard shows a running job. Built with protobuf (SCALETRAIN_TENSORBOARD);
// without it, available() is false and opening one throws "built without".
#pragma once
#include <cstdint>
#include <string>

#include "tensorboard/scalars.hpp"

namespace st::tensorboard {

// True when this build writes event files (protobuf was found).
bool available();

// TensorBoard's masked CRC32C of a record piece: rotate right by 15, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord: uint64 length (little-endian), masked CRC32C of those 8
// bytes, the data, masked CRC32C of the data. (framing.cpp: no protobuf.)
std::string frame_record(const std::string& data);

class EventFile {
 public:
  // Creates `dir` (and its parents) and a new event file in it with its
  // first record. Throws UsageError naming the folder and the reason when
  // either cannot be made or written.
  explicit EventFile(const std::string& dir);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // Appends one Event holding every scalar and flushes. Throws st::Error
  // naming the file when the write fails (a full disk).
  void write(const Scalars& s);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  int fd_ = -1;
};

}  // namespace st::tensorboard
