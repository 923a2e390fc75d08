// Implementation of formats.hpp: format detection, the llm.c and Megatron-LM
// header checks (the layouts their writers produce: llm.c
// dev/data/data_common.py write_datafile, Megatron-LM
// megatron/core/datasets/indexed_dataset.py _IndexWriter), and the mmap.
#include "data/formats.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

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
  }
  return *this;
}

Shard::~Shard() {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), map_bytes_);
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

Shard Shard::open(const std::string& path, const std::string& format, const std::string& raw_dtype,
                  const std::string& key) {
  if (format != "auto" && format != "raw" && format != "llmc" && format != "megatron")
    throw UsageError("data.format: '" + format +
                     "' is not valid; choose auto, raw, llmc or megatron");
  Shard s;
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
  s.format_ = fmt;

  if (fmt == "megatron") {
    if (!prefix)
      throw UsageError(key + ": data.format=megatron but no Megatron index " + q(path + ".idx") +
                       " (data.path names PREFIX, PREFIX.bin or PREFIX.idx of a Megatron-LM "
                       "indexed dataset)");
    const std::string idx = *prefix + ".idx", bin = *prefix + ".bin";
    FileBytes ib = read_prefix(key, idx, uint64_t(1) << 40);
    const std::string& b = ib.data;
    auto bad = [&](uint64_t off, const std::string& what) {
      return UsageError(key + ": Megatron index " + q(idx) + " at byte offset " +
                        std::to_string(off) + ": " + what);
    };
    if (b.size() < 34)
      throw bad(b.size(), "truncated: " + std::to_string(b.size()) +
                              " bytes, shorter than the 34-byte header (magic MMIDIDX\\0\\0, "
                              "uint64 version, uint8 dtype code, uint64 sequence and document "
                              "counts)");
    if (std::memcmp(b.data(), kMegatronMagic, 9) != 0)
      throw bad(0, "bad magic; a Megatron-LM index starts with the 9 bytes MMIDIDX\\0\\0");
    if (const uint64_t v = get<uint64_t>(b, 9); v != 1)
      throw bad(9, "version " + std::to_string(v) + " is not supported (Megatron-LM writes 1)");
    const uint8_t code = get<uint8_t>(b, 17);
    switch (code) {
      case 1:
        s.type_ = TokType::kU8;
        break;
      case 2:
        s.type_ = TokType::kI8;
        break;
      case 3:
        s.type_ = TokType::kI16;
        break;
      case 4:
        s.type_ = TokType::kI32;
        break;
      case 5:
        s.type_ = TokType::kI64;
        break;
      case 8:
        s.type_ = TokType::kU16;
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
    s.width_ = tok_type_width(s.type_);
    const uint64_t ns = get<uint64_t>(b, 18), nd = get<uint64_t>(b, 26);
    const uint64_t body = b.size() - 34;
    if (ns > body / 12 || nd > body / 8 || 12 * ns + 8 * nd > body ||
        (body != 12 * ns + 8 * nd && body != 13 * ns + 8 * nd))
      throw bad(18, "the header counts " + std::to_string(ns) + " sequences and " +
                        std::to_string(nd) +
                        " document indices, which need 34 + 12*sequences + 8*documents "
                        "(+ sequences for modes) bytes, but the file has " +
                        std::to_string(b.size()) + ": truncated or not a Megatron index");
    // Sequences are stored back to back (the writer's cumulative pointers):
    // the .bin is one stream of ids.
    uint64_t total = 0;
    const uint64_t off_len = 34, off_ptr = 34 + 4 * ns, off_doc = 34 + 12 * ns;
    for (uint64_t i = 0; i < ns; ++i) {
      const int32_t len = get<int32_t>(b, off_len + 4 * i);
      const int64_t ptr = get<int64_t>(b, off_ptr + 8 * i);
      if (len < 0) throw bad(off_len + 4 * i, "negative sequence length " + std::to_string(len));
      if (uint64_t(ptr) != total * uint64_t(s.width_))
        throw bad(off_ptr + 8 * i, "sequence " + std::to_string(i) + " starts at byte " +
                                       std::to_string(ptr) + ", expected " +
                                       std::to_string(total * uint64_t(s.width_)) +
                                       " (sequences must be stored back to back)");
      total += uint64_t(len);
    }
    int64_t prev = 0;
    for (uint64_t i = 0; i < nd; ++i) {
      const int64_t d = get<int64_t>(b, off_doc + 8 * i);
      if ((i == 0 && d != 0) || d < prev || uint64_t(d) > ns)
        throw bad(off_doc + 8 * i, "document index " + std::to_string(d) + " at position " +
                                       std::to_string(i) +
                                       " is out of order (they run from 0 up to the sequence "
                                       "count " +
                                       std::to_string(ns) + ")");
      prev = d;
    }
    const uint64_t bin_bytes = regular_size(key, bin);
    if (bin_bytes != total * uint64_t(s.width_))
      throw UsageError(key + ": Megatron data file " + q(bin) + " has " +
                       std::to_string(bin_bytes) + " bytes but its index " + q(idx) + " says " +
                       std::to_string(total) + " " + tok_type_name(s.type_) + " ids (" +
                       std::to_string(total * uint64_t(s.width_)) +
                       " bytes): truncated or not the pair of this index");
    s.path_ = bin;
    s.n_ = total;
    s.map(bin, bin_bytes);
    return s;
  }

  if (fmt == "llmc") {
    FileBytes fb = read_prefix(key, path, kLlmcHeaderInts * 4);
    auto bad = [&](uint64_t off, const std::string& what) {
      return UsageError(key + ": llm.c shard " + q(path) + " at byte offset " +
                        std::to_string(off) + ": " + what);
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

  // raw
  if (raw_dtype != "uint16" && raw_dtype != "uint32")
    throw UsageError("data.dtype: '" + raw_dtype + "' is not valid; choose uint16 or uint32");
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
