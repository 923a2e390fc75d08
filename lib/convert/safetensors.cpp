// Implementation of safetensors.hpp: the header checks of the format's
// specification, a memory-mapped reader and the writer.
#include "convert/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "tensor/dtype.hpp"

using nlohmann::json;

namespace st::safetensors {
namespace {

// The specification's bound on the header (100 MB), which also keeps a
// damaged length from making the reader allocate gigabytes.
constexpr uint64_t kMaxHeader = 100'000'000;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError("safetensors file '" + path + "': " + what);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400u));
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

size_t dtype_bytes(const std::string& d) {
  static const std::map<std::string, size_t> k = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = k.find(d);
  return it == k.end() ? 0 : it->second;
}

File::File(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    bad(path, "not a regular file");
  }
  const uint64_t size = uint64_t(sb.st_size);
  if (size < 8) {
    ::close(fd);
    bad(path, "truncated: " + std::to_string(size) +
                  " bytes, but a safetensors file starts with an 8-byte header length");
  }
  void* m = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) bad(path, std::string("cannot map: ") + std::strerror(errno));
  map_ = m;
  map_bytes_ = size_t(size);
  try {
    const auto* p = static_cast<const uint8_t*>(m);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];  // little-endian
    if (n > kMaxHeader)
      bad(path, "header length " + std::to_string(n) + " exceeds the format's limit of " +
                    std::to_string(kMaxHeader) + " bytes (not a safetensors file, or damaged)");
    if (8 + n > size)
      bad(path, "truncated: the header length says " + std::to_string(n) +
                    " bytes of JSON but the file has " + std::to_string(size - 8) + " after it");
    if (n == 0 || p[8] != '{') bad(path, "the header does not start with '{'");
    json h = json::parse(p + 8, p + 8 + n, nullptr, false);
    if (h.is_discarded() || !h.is_object()) bad(path, "the header is not a JSON object");
    buffer_ = p + 8 + n;
    const uint64_t buf_bytes = size - 8 - n;
    std::vector<std::pair<uint64_t, std::string>> order;
    for (auto& [name, e] : h.items()) {
      if (name == "__metadata__") {
        if (!e.is_object()) bad(path, "__metadata__ is not an object of strings");
        for (auto& [k, v] : e.items()) {
          if (!v.is_string()) bad(path, "__metadata__." + k + " is not a string");
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      const std::string where = "tensor '" + name + "': ";
      if (!e.is_object()) bad(path, where + "entry is not an object");
      if (!e.contains("dtype") || !e["dtype"].is_string()) bad(path, where + "no string 'dtype'");
      TensorInfo t;
      t.dtype = e["dtype"].get<std::string>();
      const size_t eb = dtype_bytes(t.dtype);
      if (eb == 0) bad(path, where + "unknown dtype '" + t.dtype + "'");
      if (!e.contains("shape") || !e["shape"].is_array()) bad(path, where + "no 'shape' list");
      uint64_t numel = 1;
      for (const json& d : e["shape"]) {
        if (!d.is_number_unsigned())
          bad(path,
              where + "shape " + e["shape"].dump() + " holds something other than sizes >= 0");
        const uint64_t v = d.get<uint64_t>();
        if (v > 0 && numel > (uint64_t(1) << 50) / v)
          bad(path, where + "shape " + e["shape"].dump() + " is too large");
        numel *= v;
        t.shape.push_back(int64_t(v));
      }
      const json& o = e.contains("data_offsets") ? e["data_offsets"] : json();
      if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() ||
          !o[1].is_number_unsigned())
        bad(path, where + "'data_offsets' is not two byte offsets [BEGIN, END]");
      t.begin = o[0].get<uint64_t>();
      t.end = o[1].get<uint64_t>();
      if (t.end < t.begin || t.end - t.begin != numel * eb)
        bad(path, where + "data_offsets " + o.dump() + " span " +
                      std::to_string(t.end >= t.begin ? t.end - t.begin : 0) + " bytes but " +
                      t.dtype + " " + e["shape"].dump() + " needs " + std::to_string(numel * eb));
      if (t.end > buf_bytes)
        bad(path, where + "truncated: its data ends at byte " + std::to_string(t.end) +
                      " of the data buffer, which holds " + std::to_string(buf_bytes));
      order.push_back({t.begin, name});
      tensors_.emplace(name, std::move(t));
    }
    // The buffer is fully indexed: sorted by offset, each tensor starts
    // where the one before it ended and the last ends at the buffer's end.
    std::sort(order.begin(), order.end());
    uint64_t at = 0;
    for (const auto& [b, name] : order) {
      const TensorInfo& t = tensors_.at(name);
      if (t.begin != at)
        bad(path, "tensor '" + name + "' starts at byte " + std::to_string(t.begin) +
                      " of the data buffer but the tensors before it end at " + std::to_string(at) +
                      " (a gap or an overlap)");
      at = t.end;
    }
    if (at != buf_bytes)
      bad(path, std::to_string(buf_bytes - at) +
                    " bytes after the last tensor are not described by the header");
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

File::~File() {
  if (map_) ::munmap(map_, map_bytes_);
}

const TensorInfo* File::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void to_f32(const std::string& dtype, const uint8_t* src, float* dst, int64_t n) {
  if (dtype == "F32") {
    std::memcpy(dst, src, size_t(n) * 4);
  } else if (dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = bf16_to_f32(h);
    }
  } else if (dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = f16_to_f32(h);
    }
  } else {
    throw Error("safetensors::to_f32: dtype '" + dtype + "' is not a float type");
  }
}

std::string header_json(const std::vector<OutTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  // nlohmann's object sorts keys; the offsets follow the order given, which
  // the reader does not need to match the key order.
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const OutTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    const uint64_t bytes = numel * dtype_bytes(t.dtype);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

Writer::Writer(const std::string& path, const std::vector<OutTensor>& tensors,
               const std::map<std::string, std::string>& metadata)
    : path_(path) {
  const std::string header = header_json(tensors, metadata);
  for (const OutTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    sizes_.push_back(numel * dtype_bytes(t.dtype));
  }
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw Error("cannot create '" + path + "': " + std::strerror(errno));
  uint8_t len[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  if (std::fwrite(len, 1, 8, f_) != 8 ||
      std::fwrite(header.data(), 1, header.size(), f_) != header.size())
    throw Error("writing '" + path + "' failed: " + std::strerror(errno));
}

Writer::~Writer() {
  if (f_) std::fclose(f_);
}

void Writer::append(const void* data, size_t bytes) {
  ST_CHECK(next_ < sizes_.size() && bytes == sizes_[next_], "safetensors::Writer '", path_,
           "': tensor ", next_, " of ", sizes_.size(), " given ", bytes, " bytes");
  ++next_;
  if (std::fwrite(data, 1, bytes, f_) != bytes)
    throw Error("writing '" + path_ + "' failed: " + std::strerror(errno));
}

void Writer::close() {
  ST_CHECK(next_ == sizes_.size(), "safetensors::Writer '", path_, "': ", next_, " of ",
           sizes_.size(), " tensors appended");
  const bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) throw Error("writing '" + path_ + "' failed: " + std::strerror(err));
}

void write(const std::string& path, const std::vector<OutTensor>& tensors,
           const std::map<std::string, std::string>& metadata) {
  Writer w(path, tensors, metadata);
  for (const OutTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    w.append(t.data, size_t(numel * dtype_bytes(t.dtype)));
  }
  w.close();
}

}  // namespace st::safetensors
