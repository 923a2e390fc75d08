// Test helpers: write token files in each published layout, written here
// byte by byte from the writers' own code (llm.c dev/data/data_common.py
// write_datafile; Megatron-LM indexed_dataset.py _IndexWriter), independent
// of the reader in lib/data, plus a real English text to fill them with.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace st::test {

// Real text: the GPL-3 licence every Debian system ships ("" when absent).
inline std::string english_text() {
  std::ifstream f("/usr/share/common-licenses/GPL-3", std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
// Byte-level ids of a text.
inline std::vector<uint32_t> byte_ids(const std::string& t) {
  std::vector<uint32_t> v(t.size());
  for (size_t i = 0; i < t.size(); ++i) v[i] = uint8_t(t[i]);
  return v;
}

template <class T>
void put_le(std::string& b, T v) {
  char c[sizeof(T)];
  std::memcpy(c, &v, sizeof v);
  b.append(c, sizeof v);
}
inline void put_ids(std::string& b, const std::vector<uint32_t>& ids, int width) {
  for (uint32_t x : ids) {
    if (width == 1) put_le<uint8_t>(b, uint8_t(x));
    if (width == 2) put_le<uint16_t>(b, uint16_t(x));
    if (width == 4) put_le<uint32_t>(b, x);
    if (width == 8) put_le<int64_t>(b, int64_t(x));
  }
}
inline void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  o.write(b.data(), std::streamsize(b.size()));
}

inline std::string raw_bytes(const std::vector<uint32_t>& ids, int width) {
  std::string b;
  put_ids(b, ids, width);
  return b;
}
// llm.c: 256 int32 (magic, version, count, zeros), then the ids.
inline std::string llmc_bytes(const std::vector<uint32_t>& ids, bool u32, int32_t magic = 0,
                              int32_t version = -1) {
  std::string b;
  int32_t h[256] = {};
  h[0] = magic ? magic : (u32 ? 20240801 : 20240520);
  h[1] = version >= 0 ? version : (u32 ? 7 : 1);
  h[2] = int32_t(ids.size());
  b.append(reinterpret_cast<const char*>(h), sizeof h);
  put_ids(b, ids, u32 ? 4 : 2);
  return b;
}
// Megatron: PREFIX.bin (the ids of every sequence back to back) and
// PREFIX.idx (MMIDIDX\0\0, u64 version 1, u8 dtype code, u64 sequence count,
// u64 document count, i32 lengths, i64 byte pointers, i64 document indices).
// Sequences are `seq` ids long (the last shorter), one document per 3
// sequences. dtype code: 8 uint16, 4 int32 (1 uint8, 3 int16, 5 int64).
inline void write_megatron(const std::string& prefix, const std::vector<uint32_t>& ids,
                           uint8_t code, size_t seq = 500) {
  const int width = code == 1 || code == 2 ? 1 : code == 3 || code == 8 ? 2 : code == 4 ? 4 : 8;
  write_bytes(prefix + ".bin", raw_bytes(ids, width));
  std::vector<int32_t> lens;
  for (size_t i = 0; i < ids.size(); i += seq)
    lens.push_back(int32_t(std::min(seq, ids.size() - i)));
  std::vector<int64_t> docs = {0};
  for (size_t s = 3; s < lens.size(); s += 3) docs.push_back(int64_t(s));
  docs.push_back(int64_t(lens.size()));
  std::string b("MMIDIDX\0\0", 9);
  put_le<uint64_t>(b, 1);
  put_le<uint8_t>(b, code);
  put_le<uint64_t>(b, lens.size());
  put_le<uint64_t>(b, docs.size());
  for (int32_t l : lens) put_le<int32_t>(b, l);
  int64_t ptr = 0;
  for (int32_t l : lens) {
    put_le<int64_t>(b, ptr);
    ptr += int64_t(l) * width;
  }
  for (int64_t d : docs) put_le<int64_t>(b, d);
  write_bytes(prefix + ".idx", b);
}

inline std::string fresh_tmp(const std::string& name) {
  const char* t = std::getenv("TMPDIR");
  std::string d =
      std::string(t && *t ? t : "/tmp") + "/st_data_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace st::test
