// Implementation of crc32c.hpp: hardware (SSE4.2) and table paths.
#include "core/crc32c.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace st {
namespace {
constexpr uint32_t kPoly = 0x82F63B78u;  // reflected 0x1EDC6F41

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t sw_update(uint32_t c, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> t = make_table();
  for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t hw_update(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c64);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool have_hw() {
  static const bool b = __builtin_cpu_supports("sse4.2");
  return b;
}
#endif
}  // namespace

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (have_hw()) return ~hw_update(c, p, n);
#endif
  return ~sw_update(c, p, n);
}

uint32_t crc32c_file(const std::string& path, int64_t& size, std::vector<char>& buf) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  if (buf.empty()) buf.resize(size_t(1) << 20);
  uint32_t crc = 0;
  size = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = crc32c_update(crc, buf.data(), n);
    size += int64_t(n);
  }
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) throw Error("reading '" + path + "' failed");
  return crc;
}

uint32_t crc32c_file(const std::string& path, int64_t& size) {
  std::error_code ec;
  const auto len = std::filesystem::file_size(path, ec);
  std::vector<char> buf(std::clamp<size_t>(ec ? 0 : size_t(len), 4096, size_t(1) << 20));
  return crc32c_file(path, size, buf);
}
}  // namespace st
