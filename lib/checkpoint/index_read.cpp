// Reading side of index.json: parses it into typed structs (index.hpp) and
// checks every field against docs/checkpoint-format.md before anything is
// read through it, so a damaged or hand-edited index is refused with the
// file and the field named, never dereferenced blindly. The index is bound
// to its own folder: its `step` must match the folder name step_N, and every
// rank file it names must be that rank's file of this step.
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <limits>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/index.hpp"
#include "checkpoint/rank_file.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st::ckpt {
namespace {

// Largest element count a tensor may have (keeps every product and sum in int64).
constexpr int64_t kMaxNumel = int64_t(1) << 48;
constexpr size_t kMaxDims = 32;
constexpr int kMaxWorld = 1 << 24;

struct Checker {
  std::string path;

  [[noreturn]] void fail(const std::string& field, const std::string& what,
                         const json* got = nullptr) const {
    std::string g;
    if (got) {
      g = got->dump();
      if (g.size() > 60) g = g.substr(0, 57) + "...";
      g = ", got " + g;
    }
    throw UsageError("checkpoint index '" + path + "': field '" + field + "': " + what + g);
  }

  const json& member(const json& obj, const std::string& field, const std::string& key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(field.empty() ? key : field + "." + key, "missing");
    return *it;
  }

  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(field, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", &v);
      x = int64_t(u);
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else {
      fail(field, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
           &v);
    }
    if (x < lo || x > hi)
      fail(field, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
           &v);
    return x;
  }

  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string", &v);
    return v.get<std::string>();
  }

  const json& object(const json& v, const std::string& field) const {
    if (!v.is_object()) fail(field, "expected an object", &v);
    return v;
  }

  const json& array(const json& v, const std::string& field) const {
    if (!v.is_array()) fail(field, "expected a list", &v);
    return v;
  }

  Dims dims(const json& v, const std::string& field, size_t want_rank) const {
    array(v, field);
    const std::string what =
        want_rank ? "expected a list of " + std::to_string(want_rank) +
                        " non-negative integers (one per dimension)"
                  : "expected a list of 1.." + std::to_string(kMaxDims) + " non-negative integers";
    if (want_rank ? v.size() != want_rank : (v.empty() || v.size() > kMaxDims))
      fail(field, what, &v);
    Dims d;
    for (size_t i = 0; i < v.size(); ++i)
      d.push_back(integer(v[i], field + "[" + std::to_string(i) + "]", 0, kMaxNumel));
    return d;
  }
};

// numel with a bound, so that offsets and counts stay far from overflow.
int64_t bounded_numel(const Dims& d, const Checker& c, const std::string& field, const json& v) {
  int64_t n = 1;
  for (int64_t x : d) {
    if (x != 0 && n > kMaxNumel / x) c.fail(field, "more than 2^48 elements", &v);
    n *= x;
  }
  return n;
}

// The shards of a tensor tile it exactly: no two overlap and together they
// hold its element count (what build_index guarantees at commit), so a
// load can never return elements that no shard provided.
void check_exact_cover(const IndexTensor& t, const Checker& c, const std::string& field) {
  std::vector<const IndexShard*> by_start;
  int64_t have = 0;
  for (const auto& s : t.shards) {
    if (numel(s.shape) == 0) continue;
    by_start.push_back(&s);
    have += numel(s.shape);
  }
  std::sort(by_start.begin(), by_start.end(),
            [](const IndexShard* a, const IndexShard* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < by_start.size(); ++i) {
    const IndexShard& a = *by_start[i];
    for (size_t k = i + 1; k < by_start.size(); ++k) {
      const IndexShard& b = *by_start[k];
      if (b.offset[0] >= a.offset[0] + a.shape[0]) break;  // sorted by dim 0: no later overlap
      bool overlap = true;
      for (size_t d = 0; d < a.shape.size(); ++d)
        overlap &= b.offset[d] < a.offset[d] + a.shape[d] && a.offset[d] < b.offset[d] + b.shape[d];
      if (overlap)
        c.fail(field + ".shards", "shards at offsets " + json(a.offset).dump() + " and " +
                                      json(b.offset).dump() + " overlap");
    }
  }
  const int64_t want = numel(t.global_shape);
  if (have != want)
    c.fail(field + ".shards", "shards hold " + std::to_string(have) +
                                  " elements but the global shape " + json(t.global_shape).dump() +
                                  " has " + std::to_string(want) + " (missing shards)");
}

bool is_regular_file(const std::string& p, std::string& why) {
  struct stat sb;
  if (::stat(p.c_str(), &sb) != 0) {
    why = "missing";
    return false;
  }
  if (!S_ISREG(sb.st_mode)) {
    why = "not a regular file";
    return false;
  }
  return true;
}

// Format /3: a file's data extents, sorted, disjoint and inside it.
void read_extents(const Checker& c, const json& v, const std::string& f, IndexRankFile& rf) {
  c.array(v, f);
  uint64_t end = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string g = f + "[" + std::to_string(k) + "]";
    if (!v[k].is_array() || v[k].size() != 2) c.fail(g, "expected [offset, bytes]", &v[k]);
    const uint64_t off = uint64_t(c.integer(v[k][0], g + "[0]", 0, rf.file_bytes));
    const uint64_t len = uint64_t(c.integer(v[k][1], g + "[1]", 1, rf.file_bytes));
    if (off < end || off + len > uint64_t(rf.file_bytes))
      c.fail(g,
             "overlaps the previous extent, is out of order, or runs past the file's " +
                 std::to_string(rf.file_bytes) + " bytes",
             &v[k]);
    end = off + len;
    rf.extents.push_back({off, len});
  }
}

// Format /3: the shard's bytes lie inside its file, and its block CRCs
// number one per block of them.
void read_blocks(const Checker& c, const json& s, const std::string& g, const IndexRankFile& in,
                 IndexShard& sh) {
  const uint64_t len = uint64_t(numel(sh.shape)) * sizeof(float);
  sh.file_offset =
      uint64_t(c.integer(c.member(s, g, "file_offset"), g + ".file_offset", 0, in.file_bytes));
  if (sh.file_offset + len > uint64_t(in.file_bytes))
    c.fail(g + ".file_offset",
           "the shard's " + std::to_string(len) +
               " bytes from there run past the end of its file (" + std::to_string(in.file_bytes) +
               " bytes)",
           &s["file_offset"]);
  if (len > 0 && !std::binary_search(in.extents.begin(), in.extents.end(),
                                     std::pair<uint64_t, uint64_t>{sh.file_offset, len}))
    c.fail(g + ".file_offset", "the shard's bytes are not one of its file's data_extents",
           &s["file_offset"]);
  const json& b = c.array(c.member(s, g, "block_crc32c"), g + ".block_crc32c");
  const uint64_t want = (len + in.block_bytes - 1) / in.block_bytes;
  if (b.size() != want)
    c.fail(g + ".block_crc32c", "expected " + std::to_string(want) + " CRC32Cs (one per " +
                                    std::to_string(in.block_bytes) + " bytes of the shard), got " +
                                    std::to_string(b.size()));
  for (size_t k = 0; k < b.size(); ++k)
    sh.block_crcs.push_back(
        uint32_t(c.integer(b[k], g + ".block_crc32c[" + std::to_string(k) + "]", 0, UINT32_MAX)));
}

}  // namespace

namespace {
// files: one per rank, named after it.
void read_files(Checker& c, const json& j, Index& idx) {
  const json& files = c.array(c.member(j, "", "files"), "files");
  if (files.size() != size_t(idx.world_size))
    c.fail("files", "expected one entry per rank (world_size " + std::to_string(idx.world_size) +
                        "), got " + std::to_string(files.size()) + " entries");
  std::set<int> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string f = "files[" + std::to_string(i) + "]";
    c.object(files[i], f);
    IndexRankFile rf;
    rf.rank = int(c.integer(c.member(files[i], f, "rank"), f + ".rank", 0, idx.world_size - 1));
    rf.file = c.string(c.member(files[i], f, "file"), f + ".file");
    if (rf.file != rank_file_name(rf.rank))
      c.fail(
          f + ".file",
          "rank " + std::to_string(rf.rank) + "'s file must be '" + rank_file_name(rf.rank) + "'",
          &files[i]["file"]);
    if (!seen.insert(rf.rank).second) c.fail(f + ".rank", "listed twice", &files[i]["rank"]);
    if (auto it = files[i].find("bytes"); it != files[i].end())
      rf.bytes = c.integer(*it, f + ".bytes", 0, std::numeric_limits<int64_t>::max());
    rf.file_bytes = c.integer(c.member(files[i], f, "file_bytes"), f + ".file_bytes", 0,
                              std::numeric_limits<int64_t>::max());
    rf.file_crc = uint32_t(
        c.integer(c.member(files[i], f, "file_crc32c"), f + ".file_crc32c", 0, UINT32_MAX));
    if (idx.version >= 3) {
      rf.meta_crc = uint32_t(
          c.integer(c.member(files[i], f, "meta_crc32c"), f + ".meta_crc32c", 0, UINT32_MAX));
      rf.block_bytes = uint64_t(c.integer(c.member(files[i], f, "block_bytes"), f + ".block_bytes",
                                          4096, int64_t(1) << 40));
      if (rf.block_bytes % 4096)
        c.fail(f + ".block_bytes", "expected a multiple of 4096", &files[i]["block_bytes"]);
      read_extents(c, c.member(files[i], f, "data_extents"), f + ".data_extents", rf);
    }
    idx.files.push_back(rf);
  }
}

// One shard of a tensor: a box inside its global shape, in a listed file.
IndexShard read_shard(Checker& c, const json& shards, size_t i, const std::string& f,
                      const IndexTensor& it, const Index& idx) {
  const std::string g = f + ".shards[" + std::to_string(i) + "]";
  const json& s = c.object(shards[i], g);
  IndexShard sh;
  sh.file = c.string(c.member(s, g, "file"), g + ".file");
  const IndexRankFile* in = nullptr;
  for (const auto& rf : idx.files)
    if (rf.file == sh.file) {
      in = &rf;
      sh.rank = rf.rank;
    }
  const bool listed = in != nullptr;
  if (!listed) c.fail(g + ".file", "not one of the rank files listed in 'files'", &s["file"]);
  if (auto r = s.find("rank");
      r != s.end() && c.integer(*r, g + ".rank", 0, idx.world_size - 1) != sh.rank)
    c.fail(g + ".rank", "does not match the rank of file '" + sh.file + "'", &*r);
  sh.offset = c.dims(c.member(s, g, "offset"), g + ".offset", it.global_shape.size());
  sh.shape = c.dims(c.member(s, g, "shape"), g + ".shape", it.global_shape.size());
  for (size_t k = 0; k < sh.shape.size(); ++k)
    if (sh.offset[k] + sh.shape[k] > it.global_shape[k])
      c.fail(g, "offset " + json(sh.offset).dump() + " + shape " + json(sh.shape).dump() +
                    " lies outside the global shape " + json(it.global_shape).dump());
  sh.checksum = uint32_t(c.integer(c.member(s, g, "checksum"), g + ".checksum", 0, UINT32_MAX));
  if (idx.version >= 3) read_blocks(c, s, g, *in, sh);
  return sh;
}

// tensors: every shard a box inside its tensor, in a listed file.
void read_tensors(Checker& c, const json& j, Index& idx) {
  const json& tensors = c.object(c.member(j, "", "tensors"), "tensors");
  for (const auto& [name, t] : tensors.items()) {
    const std::string f = "tensors." + name;
    if (name.empty() || name.front() == '/' || name.back() == '/' || name.rfind("_meta", 0) == 0 ||
        name.find('\0') != std::string::npos || name.find("//") != std::string::npos)
      c.fail(f,
             "not a valid tensor name (non-empty, no leading, trailing or double '/', not "
             "under _meta)");
    c.object(t, f);
    IndexTensor it;
    it.global_shape = c.dims(c.member(t, f, "global_shape"), f + ".global_shape", 0);
    bounded_numel(it.global_shape, c, f + ".global_shape", t["global_shape"]);
    if (auto d = t.find("dtype"); d != t.end() && c.string(*d, f + ".dtype") != "float32")
      c.fail(f + ".dtype", "only float32 is written by this version", &*d);
    const json& shards = c.array(c.member(t, f, "shards"), f + ".shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      it.shards.push_back(read_shard(c, shards, i, f, it, idx));
    }
    check_exact_cover(it, c, f);
    idx.tensors.emplace(name, std::move(it));
  }
}

}  // namespace

Index read_index(const std::string& step_dir) {
  Index idx;
  idx.path = (fs::path(step_dir) / "index.json").string();
  Checker c{idx.path};
  std::string why;
  if (!is_regular_file(idx.path, why))
    throw UsageError("checkpoint index '" + idx.path + "': " + why);
  json j;
  try {
    j = json::parse(read_file(idx.path));
  } catch (const json::exception& e) {
    throw UsageError("checkpoint index '" + idx.path + "': not valid JSON: " + e.what());
  }
  c.object(j, "<document>");
  const std::string format = c.string(c.member(j, "", "format"), "format");
  if (format == kFormatV1)
    throw UsageError("checkpoint index '" + idx.path + "': format is '" + format +
                     "', written by an older scaletrain whose rank files carry no checksum of "
                     "their own; this version reads '" +
                     kFormat + "', which lets it refuse a damaged file before HDF5 parses it");
  if (format != kFormat && format != kFormatV2)
    throw UsageError("checkpoint index '" + idx.path + "': format is '" + format + "', expected '" +
                     kFormat + "' (or the older '" + kFormatV2 + "')");
  idx.version = format == kFormat ? 3 : 2;
  idx.step = long(c.integer(c.member(j, "", "step"), "step", 0, LONG_MAX / 2));
  const long folder_step =
      parse_step_dir(fs::path(step_dir).lexically_normal().filename().string());
  if (folder_step >= 0 && folder_step != idx.step)
    throw UsageError("checkpoint index '" + idx.path + "': field 'step' is " +
                     std::to_string(idx.step) + " but the folder is step " +
                     std::to_string(folder_step) +
                     " (an index copied from another step; it does not describe these files)");
  idx.world_size = int(c.integer(c.member(j, "", "world_size"), "world_size", 1, kMaxWorld));
  if (auto it = j.find("layout"); it != j.end()) idx.layout = c.object(*it, "layout");
  idx.scalars = c.object(c.member(j, "", "scalars"), "scalars");
  if (auto it = idx.scalars.find("step"); it != idx.scalars.end()) {
    const long s = long(c.integer(*it, "scalars.step", 0, LONG_MAX / 2));
    if (s != idx.step)
      c.fail("scalars.step", "must equal field 'step' (" + std::to_string(idx.step) + ")", &*it);
  }

  read_files(c, j, idx);
  read_tensors(c, j, idx);
  return idx;
}

}  // namespace st::ckpt
