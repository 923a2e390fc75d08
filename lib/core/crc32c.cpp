// Implementation of crc32c.hpp: hardware (SSE4.2) and table paths.
#include "core/crc32c.hpp"

#include <fcntl.h>
#include <unistd.h>

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

uint32_t multmodp(uint32_t a, uint32_t b);
uint32_t x2nmodp(uint64_t n, unsigned k);

#if defined(__x86_64__)
// The crc32 instruction takes 3 cycles and one issues each cycle: one chain
// of them runs at a third of the core's rate. Long buffers are cut into
// stretches of three lanes checksummed side by side, each lane from a zero
// register, and joined: the register is linear in GF(2), so the CRC of
// A then B is reg(A) * x^(8|B|) + reg(B) (mod P), with x^(8 * kLane) fixed.
constexpr size_t kLane = 8192;

__attribute__((target("sse4.2"))) uint64_t hw_chain(uint64_t c, const uint8_t* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t hw_update(uint32_t c, const uint8_t* p, size_t n) {
  static const uint32_t shift = x2nmodp(kLane, 3);  // x^(8 * kLane) mod P
  uint64_t c64 = c;
  for (; n >= 3 * kLane; p += 3 * kLane, n -= 3 * kLane) {
    uint64_t a = c64, b = 0, d = 0;
    for (size_t i = 0; i < kLane; i += 8) {
      uint64_t va, vb, vd;
      std::memcpy(&va, p + i, 8);
      std::memcpy(&vb, p + kLane + i, 8);
      std::memcpy(&vd, p + 2 * kLane + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      d = _mm_crc32_u64(d, vd);
    }
    c64 = multmodp(shift, multmodp(shift, uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(d);
  }
  c64 = hw_chain(c64, p, n);
  p += n / 8 * 8;
  n %= 8;
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

namespace {
// Polynomial arithmetic modulo the CRC polynomial (reflected bit order),
// after zlib's crc32.c: a * b mod P.
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(n * 2^k) mod P.
uint32_t x2nmodp(uint64_t n, unsigned k) {
  static const std::array<uint32_t, 32> x2n = [] {
    std::array<uint32_t, 32> t{};
    uint32_t p = 1u << 30;  // x^1
    t[0] = p;
    for (size_t i = 1; i < t.size(); ++i) t[i] = p = multmodp(p, p);
    return t;
  }();
  uint32_t p = 1u << 31;  // x^0
  while (n) {
    if (n & 1) p = multmodp(x2n[k & 31], p);
    n >>= 1;
    ++k;
  }
  return p;
}
}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}

uint32_t crc32c_zeros(uint32_t crc, uint64_t n) {
  // Zero bytes multiply the (pre-inverted) register by x^(8n).
  return ~multmodp(x2nmodp(n, 3), ~crc);
}

uint32_t crc32c_file(const std::string& path, int64_t& size, std::vector<char>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  // Read once, front to back: the kernel reads ahead (a doubled window)
  // while the checksum runs, so a cold file streams at the disk's rate.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (buf.empty()) buf.resize(size_t(1) << 20);
  uint32_t crc = 0;
  size = 0;
  int err = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    crc = crc32c_update(crc, buf.data(), size_t(n));
    size += int64_t(n);
  }
  ::close(fd);
  if (err) throw Error("reading '" + path + "' failed: " + std::strerror(err));
  return crc;
}

uint32_t crc32c_file(const std::string& path, int64_t& size) {
  std::error_code ec;
  const auto len = std::filesystem::file_size(path, ec);
  std::vector<char> buf(std::clamp<size_t>(ec ? 0 : size_t(len), 4096, size_t(4) << 20));
  return crc32c_file(path, size, buf);
}
}  // namespace st
