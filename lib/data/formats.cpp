// Implementation of formats.hpp: format detection, the llm.c and Megatron-LM
// header checks (the layouts their writers produce: llm.c
// dev/data/data_common.py write_datafile, Megatron-LM
// megatron/core/datasets/indexed_dataset.py _IndexWriter), and the mmap.
#include "data/formats.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "config/config.hpp"
#include "core/error.hpp"

namespace st {

const char* tok_type_name(TokType t) {
  switch (t) {
    case TokType::kU8:
      return "uint8";
    case TokType::kI8:
      return "int8";
    case TokType::kU16:
      return "uint16";
    case TokType::kI16:
      return "int16";
    case TokType::kU32:
      return "uint32";
    case TokType::kI32:
      return "int32";
    case TokType::kI64:
      return "int64";
  }
  return "?";
}

int tok_type_width(TokType t) {
  switch (t) {
    case TokType::kU8:
    case TokType::kI8:
      return 1;
    case TokType::kU16:
    case TokType::kI16:
      return 2;
    case TokType::kU32:
    case TokType::kI32:
      return 4;
    case TokType::kI64:
      return 8;
  }
  return 1;
}

namespace {
bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
bool exists(const std::string& p) {
  struct stat sb;
  return ::stat(p.c_str(), &sb) == 0;
}
std::string file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  return "a special file";
}
std::string q(const std::string& p) { return "'" + p + "'"; }

// The Megatron prefix `path` names (PREFIX, PREFIX.bin with PREFIX.idx beside
// it, or PREFIX.idx), if any.
std::optional<std::string> megatron_prefix(const std::string& path) {
  if (ends_with(path, ".idx")) return path.substr(0, path.size() - 4);
  if (ends_with(path, ".bin") && exists(path.substr(0, path.size() - 4) + ".idx"))
    return path.substr(0, path.size() - 4);
  if (!exists(path) && exists(path + ".idx")) return path;
  return std::nullopt;
}

// A read-only file of at most a few hundred bytes of header, or a whole
// index: opened, checked to be a regular file, read.
struct FileBytes {
  std::string data;
  uint64_t size = 0;
};
uint64_t regular_size(const std::string& key, const std::string& file) {
  struct stat sb;
  if (::stat(file.c_str(), &sb) != 0)
    throw UsageError(key + ": cannot open token file " + q(file) + ": " + std::strerror(errno) +
                     " (make one with scaletrain-tokenize, or set data.source=synthetic)");
  if (!S_ISREG(sb.st_mode))
    throw UsageError(key + ": " + q(file) + " is " + file_kind(sb.st_mode) +
                     ", not a regular file (token files are memory-mapped; make one with "
                     "scaletrain-tokenize)");
  return uint64_t(sb.st_size);
}
FileBytes read_prefix(const std::string& key, const std::string& file, uint64_t max_bytes) {
  FileBytes fb;
  fb.size = regular_size(key, file);
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError(key + ": cannot open " + q(file) + ": " + std::strerror(errno));
  fb.data.resize(size_t(std::min(fb.size, max_bytes)));
  size_t got = 0;
  while (got < fb.data.size()) {
    ssize_t r = ::read(fd, fb.data.data() + got, fb.data.size() - got);
    if (r <= 0) break;
    got += size_t(r);
  }
  ::close(fd);
  fb.data.resize(got);
  return fb;
}
template <class T>
T get(const std::string& b, uint64_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}
}  // namespace

Shard& Shard::operator=(Shard&& o) noexcept {
  if (this != &o) {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), map_bytes_);
    path_ = std::move(o.path_);
    format_ = std::move(o.format_);
    type_ = o.type_;
    width_ = o.width_;
    data_offset_ = o.data_offset_;
    n_ = o.n_;
    base_ = o.base_;
    map_bytes_ = o.map_bytes_;
    o.base_ = nullptr;
    o.map_bytes_ = 0;
    if (idx_) ::munmap(const_cast<unsigned char*>(idx_), idx_bytes_);
    idx_path_ = std::move(o.idx_path_);
    key_ = std::move(o.key_);
    idx_ = o.idx_;
    idx_bytes_ = o.idx_bytes_;
    seqs_ = o.seqs_;
    docs_ = o.docs_;
    o.idx_ = nullptr;
    o.idx_bytes_ = 0;
  }
  return *this;
}

Shard::~Shard() {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), map_bytes_);
  if (idx_) ::munmap(const_cast<unsigned char*>(idx_), idx_bytes_);
}

namespace {
constexpr uint64_t kIdxHeader = 34;
template <class T>
T load_at(const unsigned char* p, uint64_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}
}  // namespace

// The index's arrays: lengths at 34, pointers at 34 + 4S, document indices
// at 34 + 12S (docs/data.md); open() checked that the file holds them all.
int32_t Shard::seq_len(uint64_t i) const { return load_at<int32_t>(idx_, kIdxHeader + 4 * i); }
int64_t Shard::seq_ptr(uint64_t i) const {
  return load_at<int64_t>(idx_, kIdxHeader + 4 * seqs_ + 8 * i);
}
int64_t Shard::doc_index(uint64_t i) const {
  return load_at<int64_t>(idx_, kIdxHeader + 12 * seqs_ + 8 * i);
}

void Shard::check_seq(uint64_t i) const {
  auto bad = [&](uint64_t off, const std::string& what) {
    return UsageError(key_ + ": Megatron index " + q(idx_path_) + " at byte offset " +
                      std::to_string(off) + ": " + what);
  };
  const int32_t len = seq_len(i);
  if (len < 0) throw bad(kIdxHeader + 4 * i, "negative sequence length " + std::to_string(len));
  uint64_t want = 0;
  if (i > 0) {
    const int32_t pl = seq_len(i - 1);
    if (pl < 0)
      throw bad(kIdxHeader + 4 * (i - 1), "negative sequence length " + std::to_string(pl));
    want = uint64_t(seq_ptr(i - 1)) + uint64_t(pl) * uint64_t(width_);
  }
  const int64_t ptr = seq_ptr(i);
  if (uint64_t(ptr) != want)
    throw bad(kIdxHeader + 4 * seqs_ + 8 * i, "sequence " + std::to_string(i) + " starts at byte " +
                                                  std::to_string(ptr) + ", expected " +
                                                  std::to_string(int64_t(want)) +
                                                  " (sequences must be stored back to back)");
}

void Shard::check_index(uint64_t first, uint64_t count) const {
  if (!idx_ || seqs_ == 0 || count == 0) return;
  const uint64_t b0 = first * uint64_t(width_), b1 = (first + count) * uint64_t(width_);
  // The last sequence starting at or before byte b0 (pointers ascend in a
  // sound index; in a broken one the search still ends, and the checks
  // below find the break or the window's sequences are sound).
  uint64_t lo = 0, hi = seqs_;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (uint64_t(seq_ptr(mid)) <= b0)
      lo = mid;
    else
      hi = mid;
  }
  for (uint64_t i = lo; i < seqs_; ++i) {
    check_seq(i);
    if (i + 1 < seqs_ && uint64_t(seq_ptr(i)) + uint64_t(seq_len(i)) * uint64_t(width_) >= b1)
      break;
  }
}

void Shard::check_whole_index() const {
  if (!idx_) return;
  for (uint64_t i = 0; i < seqs_; ++i) check_seq(i);
  int64_t prev = 0;
  for (uint64_t i = 0; i < docs_; ++i) {
    const int64_t d = doc_index(i);
    if ((i == 0 && d != 0) || d < prev || uint64_t(d) > seqs_)
      throw UsageError(key_ + ": Megatron index " + q(idx_path_) + " at byte offset " +
                       std::to_string(kIdxHeader + 12 * seqs_ + 8 * i) + ": document index " +
                       std::to_string(d) + " at position " + std::to_string(i) +
                       " is out of order (they run from 0 up to the sequence count " +
                       std::to_string(seqs_) + ")");
    prev = d;
  }
}

void Shard::map(const std::string& file, uint64_t bytes) {
  if (bytes == 0) return;
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError("cannot open " + q(file) + ": " + std::strerror(errno));
  void* m = ::mmap(nullptr, size_t(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw UsageError("cannot mmap " + q(file) + ": " + std::strerror(errno));
  base_ = static_cast<const unsigned char*>(m);
  map_bytes_ = size_t(bytes);
}

namespace {
UsageError index_error(const std::string& key, const std::string& idx, uint64_t off,
                       const std::string& what) {
  return UsageError(key + ": Megatron index " + q(idx) + " at byte offset " + std::to_string(off) +
                    ": " + what);
}

// A Megatron index's dtype code as a token type; float codes and codes out
// of range are refused at the header's byte 17.
template <class Bad>
TokType megatron_dtype(uint8_t code, const Bad& bad) {
  switch (code) {
    case 1:
      return TokType::kU8;
      break;
    case 2:
      return TokType::kI8;
      break;
    case 3:
      return TokType::kI16;
      break;
    case 4:
      return TokType::kI32;
      break;
    case 5:
      return TokType::kI64;
      break;
    case 8:
      return TokType::kU16;
      break;
    case 6:
    case 7:
      throw bad(17, "dtype code " + std::to_string(code) + " (" +
                        (code == 6 ? "float64" : "float32") +
                        ") cannot hold token ids; valid codes: 1 uint8, 2 int8, 3 int16, "
                        "4 int32, 5 int64, 8 uint16");
    default:
      throw bad(17, "dtype code " + std::to_string(code) +
                        " is out of range; valid codes: 1 uint8, 2 int8, 3 int16, 4 int32, "
                        "5 int64, 8 uint16");
  }
}
}  // namespace

Shard Shard::open(const std::string& path, const std::string& format, const std::string& raw_dtype,
                  const std::string& key) {
  check_choice("data", "format", format, key);
  const auto prefix = megatron_prefix(path);
  std::string fmt = format;
  if (fmt == "auto") {
    if (prefix) {
      fmt = "megatron";
    } else {
      FileBytes fb = read_prefix(key, path, 4);
      const int32_t m = fb.data.size() == 4 ? get<int32_t>(fb.data, 0) : 0;
      fmt = (m == kLlmcMagicU16 || m == kLlmcMagicU32) ? "llmc" : "raw";
    }
  }
  Shard s = fmt == "megatron" ? open_megatron(path, prefix, key)
            : fmt == "llmc"   ? open_llmc(path, key)
                              : open_raw(path, raw_dtype, key);
  s.format_ = fmt;
  return s;
}

Shard Shard::open_megatron(const std::string& path, const std::optional<std::string>& prefix,
                           const std::string& key) {
  Shard s;
  if (!prefix)
    throw UsageError(key + ": data.format=megatron but no Megatron index " + q(path + ".idx") +
                     " (data.path names PREFIX, PREFIX.bin or PREFIX.idx of a Megatron-LM "
                     "indexed dataset)");
  const std::string idx = *prefix + ".idx", bin = *prefix + ".bin";
  // The header and the index's size now; its arrays are mapped and read
  // as the sampler asks (check_index), so opening costs the same for an
  // index of a thousand sequences or of a billion.
  FileBytes ib = read_prefix(key, idx, kIdxHeader);
  const std::string& b = ib.data;
  auto bad = [&](uint64_t off, const std::string& what) {
    return index_error(key, idx, off, what);
  };
  if (ib.size < kIdxHeader)
    throw bad(ib.size, "truncated: " + std::to_string(ib.size) +
                           " bytes, shorter than the 34-byte header (magic MMIDIDX\\0\\0, "
                           "uint64 version, uint8 dtype code, uint64 sequence and document "
                           "counts)");
  if (std::memcmp(b.data(), kMegatronMagic, 9) != 0)
    throw bad(0, "bad magic; a Megatron-LM index starts with the 9 bytes MMIDIDX\\0\\0");
  if (const uint64_t v = get<uint64_t>(b, 9); v != 1)
    throw bad(9, "version " + std::to_string(v) + " is not supported (Megatron-LM writes 1)");
  s.type_ = megatron_dtype(get<uint8_t>(b, 17), bad);
  s.width_ = tok_type_width(s.type_);
  const uint64_t ns = get<uint64_t>(b, 18), nd = get<uint64_t>(b, 26);
  const uint64_t body = ib.size - kIdxHeader;
  if (ns > body / 12 || nd > body / 8 || 12 * ns + 8 * nd > body ||
      (body != 12 * ns + 8 * nd && body != 13 * ns + 8 * nd))
    throw bad(18, "the header counts " + std::to_string(ns) + " sequences and " +
                      std::to_string(nd) +
                      " document indices, which need 34 + 12*sequences + 8*documents "
                      "(+ sequences for modes) bytes, but the file has " +
                      std::to_string(ib.size) + ": truncated or not a Megatron index");
  s.idx_path_ = idx;
  s.key_ = key;
  s.seqs_ = ns;
  s.docs_ = nd;
  {
    int fd = ::open(idx.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UsageError(key + ": cannot open " + q(idx) + ": " + std::strerror(errno));
    void* m = ::mmap(nullptr, size_t(ib.size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED)
      throw UsageError(key + ": cannot mmap " + q(idx) + ": " + std::strerror(errno));
    s.idx_ = static_cast<const unsigned char*>(m);
    s.idx_bytes_ = size_t(ib.size);
  }
  const uint64_t total_bytes = s.check_index_ends();
  const uint64_t bin_bytes = regular_size(key, bin);
  if (bin_bytes != total_bytes || total_bytes % uint64_t(s.width_) != 0)
    throw UsageError(key + ": Megatron data file " + q(bin) + " has " + std::to_string(bin_bytes) +
                     " bytes but its index " + q(idx) + " says its last sequence ends at byte " +
                     std::to_string(total_bytes) + " (" +
                     std::to_string(total_bytes / uint64_t(s.width_)) + " " +
                     tok_type_name(s.type_) + " ids): truncated or not the pair of this index");
  s.path_ = bin;
  s.n_ = total_bytes / uint64_t(s.width_);
  s.map(bin, bin_bytes);
  return s;
}

// What can be checked in O(1): the first sequence starts at byte 0, the
// last ends where the .bin does, the document indices start at 0 and end at
// most at the sequence count. Sequences in between are checked as they are
// read (check_index), or all by data.verify=full. Returns the byte where
// the last sequence ends.
uint64_t Shard::check_index_ends() const {
  const uint64_t ns = seqs_, nd = docs_;
  auto bad = [&](uint64_t off, const std::string& what) {
    return index_error(key_, idx_path_, off, what);
  };
  uint64_t total_bytes = 0;
  if (ns > 0) {
    if (const int64_t p0 = seq_ptr(0); p0 != 0)
      throw bad(kIdxHeader + 4 * ns, "sequence 0 starts at byte " + std::to_string(p0) +
                                         ", expected 0 (sequences must be stored back to back)");
    const int32_t last = seq_len(ns - 1);
    if (last < 0)
      throw bad(kIdxHeader + 4 * (ns - 1), "negative sequence length " + std::to_string(last));
    const int64_t lp = seq_ptr(ns - 1);
    if (lp < 0)
      throw bad(kIdxHeader + 4 * ns + 8 * (ns - 1), "sequence " + std::to_string(ns - 1) +
                                                        " starts at byte " + std::to_string(lp) +
                                                        " (sequences must be stored back to back)");
    total_bytes = uint64_t(lp) + uint64_t(last) * uint64_t(width_);
  }
  if (nd > 0) {
    const int64_t d0 = doc_index(0), dl = doc_index(nd - 1);
    if (d0 != 0)
      throw bad(kIdxHeader + 12 * ns, "document index " + std::to_string(d0) +
                                          " at position 0 is out of order (they run from 0 up "
                                          "to the sequence count " +
                                          std::to_string(ns) + ")");
    if (dl < 0 || uint64_t(dl) > ns)
      throw bad(kIdxHeader + 12 * ns + 8 * (nd - 1),
                "document index " + std::to_string(dl) + " at position " + std::to_string(nd - 1) +
                    " is out of order (they run from 0 up to the sequence count " +
                    std::to_string(ns) + ")");
  }
  return total_bytes;
}

Shard Shard::open_llmc(const std::string& path, const std::string& key) {
  Shard s;
  FileBytes fb = read_prefix(key, path, kLlmcHeaderInts * 4);
  auto bad = [&](uint64_t off, const std::string& what) {
    return UsageError(key + ": llm.c shard " + q(path) + " at byte offset " + std::to_string(off) +
                      ": " + what);
  };
  if (fb.size < uint64_t(kLlmcHeaderInts) * 4)
    throw bad(fb.size, "truncated: " + std::to_string(fb.size) +
                           " bytes, shorter than the 1024-byte header (256 int32)");
  const int32_t magic = get<int32_t>(fb.data, 0), ver = get<int32_t>(fb.data, 4),
                count = get<int32_t>(fb.data, 8);
  if (magic != kLlmcMagicU16 && magic != kLlmcMagicU32)
    throw bad(0, "bad magic " + std::to_string(magic) + "; an llm.c shard starts with " +
                     std::to_string(kLlmcMagicU16) + " (uint16 ids) or " +
                     std::to_string(kLlmcMagicU32) + " (uint32 ids)");
  const bool u16 = magic == kLlmcMagicU16;
  const int32_t want = u16 ? kLlmcVersionU16 : kLlmcVersionU32;
  if (ver != want)
    throw bad(4, "version " + std::to_string(ver) + " is not supported with magic " +
                     std::to_string(magic) + " (llm.c writes version " + std::to_string(want) +
                     ")");
  if (count < 0) throw bad(8, "negative token count " + std::to_string(count));
  s.type_ = u16 ? TokType::kU16 : TokType::kU32;
  s.width_ = u16 ? 2 : 4;
  const uint64_t expect = uint64_t(kLlmcHeaderInts) * 4 + uint64_t(count) * uint64_t(s.width_);
  if (fb.size != expect)
    throw bad(8, "the header counts " + std::to_string(count) + " " + tok_type_name(s.type_) +
                     " tokens, so the file should have " + std::to_string(expect) +
                     " bytes, but it has " + std::to_string(fb.size) +
                     ": truncated or not an llm.c shard");
  s.path_ = path;
  s.data_offset_ = uint64_t(kLlmcHeaderInts) * 4;
  s.n_ = uint64_t(count);
  s.map(path, fb.size);
  return s;
}

Shard Shard::open_raw(const std::string& path, const std::string& raw_dtype,
                      const std::string& key) {
  check_choice("data", "dtype", raw_dtype, key);
  Shard s;
  s.type_ = raw_dtype == "uint16" ? TokType::kU16 : TokType::kU32;
  s.width_ = tok_type_width(s.type_);
  const uint64_t bytes = regular_size(key, path);
  if (bytes % uint64_t(s.width_) != 0)
    throw UsageError(key + ": " + q(path) + " has " + std::to_string(bytes) +
                     " bytes, not a multiple of " + std::to_string(s.width_) + " (" + raw_dtype +
                     "): truncated or not a " + raw_dtype + " token file");
  s.path_ = path;
  s.n_ = bytes / uint64_t(s.width_);
  s.map(path, bytes);
  return s;
}

}  // namespace st
