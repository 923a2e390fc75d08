// TensorBoard's record framing (event_file.hpp): the TFRecord layout with
// its masked CRC32C. Without protobuf, so every build (and its unit test) has it.
#include <cstring>

#include "core/crc32c.hpp"
#include "tensorboard/event_file.hpp"

namespace st::tensorboard {

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& data) {
  unsigned char len[8];
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  auto le32 = [](uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
    return s;
  };
  std::string out(reinterpret_cast<const char*>(len), 8);
  out += le32(masked_crc32c(len, 8));
  out += data;
  out += le32(masked_crc32c(data.data(), data.size()));
  return out;
}

}  // namespace st::tensorboard
