// CRC32C (Castagnoli, the iSCSI/ext4 polynomial 0x1EDC6F41, reflected): the
// checksum stored with every checkpoint dataset, and the one TensorBoard's
// record framing masks (lib/tensorboard). In core so both can use it. Streaming: feed pieces in
// order with crc32c_update, starting from 0. Uses the SSE4.2 crc32
// instruction when the CPU has it, a table otherwise; both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace st {
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_update(0, data, n); }
// The CRC32C of A followed by B from crc32c(A), crc32c(B) and B's length
// (zlib's crc32_combine for this polynomial): lets a writer checksum a file
// from the pieces it checksummed while writing them, without reading it back.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
// crc32c_update(crc, n zero bytes) without the bytes (a file's holes).
uint32_t crc32c_zeros(uint32_t crc, uint64_t n);
// CRC32C of a whole file, read in pieces of `buf` (resized to 1 MiB when
// empty); `size` gets its length. Throws st::Error naming the file when it
// cannot be read. A caller that checksums many files keeps one buffer: a
// fresh one costs a page fault per page on first touch (the checkpoint
// writer once zeroed a fresh 16 MiB buffer per save: 0.1 s on a VM).
uint32_t crc32c_file(const std::string& path, int64_t& size, std::vector<char>& buf);
// The same with a buffer of its own (4 MiB, or the file's size when smaller).
uint32_t crc32c_file(const std::string& path, int64_t& size);
}  // namespace st
