// Loading side: verify a step folder (structure, the rank files' metadata
// CRC32C before HDF5 parses them, the whole files' CRC32C unless the loader
// is to check the data block by block), pick the newest good one, and load
// shards of a new layout from whichever saved shards hold them: format /3
// by whole CRC blocks read once (block_read.hpp), /2 by HDF5 hyperslabs.
#include <algorithm>
#include <filesystem>
#include <map>

#include "checkpoint/block_read.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/index.hpp"
#include "checkpoint/rank_file.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using Dims = std::vector<int64_t>;

namespace st {
namespace {

// A rank file belongs to the index that names it: same format, step, rank
// and world size in its root attributes (docs/checkpoint-format.md).
void check_binding(hid_t f, const ckpt::Index& idx, int rank) {
  auto one = [&](const char* a) {
    auto v = h5::read_attr_i64(f, a);
    if (v.size() != 1)
      throw Error(detail::cat("root attribute '", a, "' has ", v.size(), " values, expected 1"));
    return v[0];
  };
  const std::string format = h5::read_attr_str(f, "format");
  const char* want = idx.version >= 3 ? ckpt::kFormat : ckpt::kFormatV2;
  if (format != want) throw Error("format is '" + format + "' but index.json is '" + want + "'");
  const int64_t step = one("step"), r = one("rank"), world = one("world_size");
  if (step != idx.step)
    throw Error(detail::cat("this file was written at step ", step, " but '", idx.path,
                            "' is step ", idx.step, " (a rank file of another step)"));
  if (r != rank || world != idx.world_size)
    throw Error(detail::cat("this file is rank ", r, " of ", world, " but '", idx.path,
                            "' lists it as rank ", rank, " of ", idx.world_size));
}

std::vector<hsize_t> hs(const Dims& d) { return {d.begin(), d.end()}; }

// Format /3: the rank file's bytes outside its data (HDF5's metadata, the
// _meta blobs) against index.json, before HDF5 parses them. "" or why not.
std::string check_meta(const std::string& path, const ckpt::IndexRankFile& rf) {
  try {
    const uint32_t got = ckpt::meta_crc32c(path, uint64_t(rf.file_bytes), rf.extents);
    if (got == rf.meta_crc) return "";
    return detail::cat("metadata checksum mismatch: index.json says ", rf.meta_crc, ", file ", got,
                       " (the file was damaged, or is another checkpoint's)");
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Format /3: HDF5 keeps the dataset where index.json says its bytes are.
void check_storage(hid_t d, const ckpt::IndexShard& s) {
  if (ckpt::numel(s.shape) == 0) return;
  h5::Handle dcpl(ST_HDF5_CHECK(H5Dget_create_plist(d)));
  if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS) throw Error("not a contiguous dataset");
  const haddr_t a = H5Dget_offset(d);
  if (a == HADDR_UNDEF || uint64_t(a) != s.file_offset)
    throw Error(detail::cat("its data is at byte ",
                            a == HADDR_UNDEF ? std::string("(none)") : std::to_string(a),
                            " of the file but index.json says ", s.file_offset));
}

std::vector<uint8_t> read_meta(hid_t f, const std::string& path, const char* name) {
  try {
    auto v = h5::read_bytes(f, name);
    h5::Handle d(ST_HDF5_CHECK(H5Dopen2(f, name, H5P_DEFAULT)));
    uint32_t want = h5::read_attr_u32(d, "checksum");
    uint32_t got = crc32c(v.data(), v.size());
    if (want != got)
      throw Error(detail::cat("checksum mismatch (stored ", want, ", data ", got, ")"));
    return v;
  } catch (const std::exception& e) {
    throw Error("'" + path + "', dataset '" + name + "': " + e.what());
  }
}

int64_t ravel(const Dims& idx, const Dims& shape) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + idx[i];
  return f;
}
Dims unravel(int64_t f, const Dims& shape) {
  Dims idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = f % shape[i];
    f /= shape[i];
  }
  return idx;
}

// Calls fn(index of the first element of each last-dim row) over a box.
template <typename F>
void for_rows(const Dims& shape, F&& fn) {
  if (ckpt::numel(shape) == 0) return;
  Dims idx(shape.size(), 0);
  while (true) {
    fn(idx);
    int k = int(shape.size()) - 2;
    while (k >= 0 && ++idx[size_t(k)] == shape[size_t(k)]) idx[size_t(k--)] = 0;
    if (k < 0) return;
  }
}

// Flat (row-major in global_shape) element ranges [a, b) covered by a box, merged.
// Unmerged runs stay within one last-dim row (what one hyperslab read can take).
std::vector<std::pair<int64_t, int64_t>> flat_runs(const Dims& gshape, const Dims& off,
                                                   const Dims& shape, bool merge) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  Dims g(off.size());
  for_rows(shape, [&](const Dims& idx) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = off[i] + idx[i];
    int64_t a = ravel(g, gshape), b = a + shape.back();
    if (merge && !runs.empty() && runs.back().second == a)
      runs.back().second = b;
    else
      runs.push_back({a, b});
  });
  return runs;
}

}  // namespace

std::string verify_checkpoint(const std::string& step_dir, const VerifyOptions& o) {
  h5::quiet_errors();
  ckpt::Index idx;
  try {
    idx = ckpt::read_index(step_dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  std::map<std::string, std::vector<std::pair<std::string, const ckpt::IndexShard*>>> by_file;
  for (const auto& [name, t] : idx.tensors)
    for (const auto& s : t.shards) by_file[s.file].push_back({name, &s});
  for (size_t i = 0; i < idx.files.size(); ++i) {
    if (int(i % size_t(std::max(1, o.nparts))) != o.part) continue;
    const auto& rf = idx.files[i];
    std::string path = (fs::path(step_dir) / rf.file).string();
    std::error_code ec;
    if (!fs::exists(path, ec)) return "'" + path + "': missing";
    if (!fs::is_regular_file(path, ec)) return "'" + path + "': not a regular file";
    // The whole file against index.json before HDF5 parses any of it: a
    // damaged or swapped file never reaches the HDF5 library's parser.
    const int64_t size = int64_t(fs::file_size(path, ec));
    if (ec || size != rf.file_bytes)
      return detail::cat("'", path, "': ", size, " bytes but index.json says ", rf.file_bytes,
                         " (truncated or changed)");
    if (o.checksums && idx.version >= 3) {
      const std::string why = check_meta(path, rf);
      if (!why.empty()) return "'" + path + "': " + why;
    }
    if (o.checksums && (o.data || idx.version < 3)) {
      int64_t n = 0;
      uint32_t crc = 0;
      try {
        crc = crc32c_file(path, n);
      } catch (const std::exception& e) {
        return e.what();
      }
      if (crc != rf.file_crc || n != rf.file_bytes)
        return detail::cat("'", path, "': file checksum mismatch: index.json says ", rf.file_crc,
                           ", data ", crc, " (the file was damaged, or is another checkpoint's)");
    }
    std::string ds;
    try {
      h5::Handle f = h5::open_file_readonly(path);
      check_binding(f, idx, rf.rank);
      for (const auto& entry : by_file[rf.file]) {  // (clang 14 cannot capture bindings)
        const std::string& name = entry.first;
        const ckpt::IndexShard* s = entry.second;
        ds = name;
        h5::Handle d(ST_HDF5_CHECK(H5Dopen2(f, name.c_str(), H5P_DEFAULT)));
        Dims shape = h5::dataset_shape(d);
        if (shape != s->shape)
          throw Error(detail::cat("shape ", json(shape).dump(), " but index.json says ",
                                  json(s->shape).dump()));
        uint32_t stored = h5::read_attr_u32(d, "checksum");
        if (stored != s->checksum)
          throw Error(
              detail::cat("checksum attribute ", stored, " but index.json says ", s->checksum));
        if (idx.version >= 3) check_storage(d, *s);
      }
      ds.clear();
      if (o.checksums) {
        read_meta(f, path, ckpt::kScalarsDataset);
        read_meta(f, path, ckpt::kRngDataset);
      }
    } catch (const std::exception& e) {
      return "'" + path + "'" + (ds.empty() ? "" : ", dataset '" + ds + "'") + ": " + e.what();
    }
  }
  return "";
}

std::optional<std::string> find_latest_good(const std::string& dir, const VerifyOptions& o,
                                            std::vector<std::string>* rejected) {
  const auto steps = committed_steps(dir);
  std::string latest;
  try {
    latest = read_file((fs::path(dir) / "latest").string());
    while (!latest.empty() && std::isspace((unsigned char)latest.back())) latest.pop_back();
  } catch (const std::exception&) {
  }
  if (!steps.empty() && !latest.empty() && fs::path(steps[0].second).filename() != latest)
    logw("checkpoint: '", dir, "/latest' names ", latest, " but the newest committed folder is ",
         fs::path(steps[0].second).filename().string(), "; trying newest first");
  for (const auto& [n, path] : steps) {
    if (o.before_step >= 0 && n >= o.before_step) continue;
    std::string why = verify_checkpoint(path, o);
    const bool good = o.all_good ? o.all_good(why.empty()) : why.empty();
    if (good) return path;
    if (why.empty()) {
      why = "another rank's share of its rank files did not verify (that rank logs why)";
    } else {
      logw("checkpoint: skipping ", path, ": ", why);
    }
    if (rejected) rejected->push_back(path + ": " + why);
  }
  return std::nullopt;
}

namespace {

// Format /2: the box [lo, lo+cnt) of saved shard (soff, sshape) into `w`
// by one HDF5 hyperslab read.
void read_box(hid_t d, const Dims& soff, const Dims& lo, const Dims& cnt, ShardView& w) {
  const size_t nd = cnt.size();
  h5::Handle fsp(ST_HDF5_CHECK(H5Dget_space(d)));
  Dims fs0(nd), ms0(nd);
  for (size_t i = 0; i < nd; ++i) {
    fs0[i] = lo[i] - soff[i];
    ms0[i] = lo[i] - w.offset[i];
  }
  auto a = hs(fs0), b = hs(ms0), c = hs(cnt), wdims = hs(w.shape);
  ST_HDF5_CHECK(H5Sselect_hyperslab(fsp, H5S_SELECT_SET, a.data(), nullptr, c.data(), nullptr));
  h5::Handle msp(ST_HDF5_CHECK(H5Screate_simple(int(nd), wdims.data(), nullptr)));
  ST_HDF5_CHECK(H5Sselect_hyperslab(msp, H5S_SELECT_SET, b.data(), nullptr, c.data(), nullptr));
  ST_HDF5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, msp, fsp, H5P_DEFAULT, w.data));
}

// CRC32C of the whole saved shard (soff, sshape) as loaded into `w`.
uint32_t box_crc(const ShardView& w, const Dims& soff, const Dims& sshape) {
  const size_t nd = sshape.size();
  uint32_t crc = 0;
  Dims g(nd);
  for_rows(sshape, [&](const Dims& k) {
    for (size_t i = 0; i < nd; ++i) g[i] = soff[i] + k[i] - w.offset[i];
    crc = crc32c_update(crc, w.data + ravel(g, w.shape), size_t(sshape.back()) * sizeof(float));
  });
  return crc;
}

// Format /2: `n` elements from local index `src` (within one row) to `dst`.
void read_run(hid_t d, const Dims& src, int64_t n, float* dst) {
  Dims cnt(src.size(), 1);
  cnt.back() = n;
  auto sa = hs(src), sc = hs(cnt);
  h5::Handle fsp(ST_HDF5_CHECK(H5Dget_space(d)));
  ST_HDF5_CHECK(H5Sselect_hyperslab(fsp, H5S_SELECT_SET, sa.data(), nullptr, sc.data(), nullptr));
  hsize_t len = hsize_t(n);
  h5::Handle msp(ST_HDF5_CHECK(H5Screate_simple(1, &len, nullptr)));
  ST_HDF5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, msp, fsp, H5P_DEFAULT, dst));
}

// Format /3: what one load reads of each rank file, by saved shard.
struct Plan {
  std::map<std::string, std::map<const ckpt::IndexShard*, ckpt::ShardRead>> files;
  void copy(const ckpt::IndexShard& s, const std::string& name, int64_t src_elem, int64_t n,
            float* dst) {
    ckpt::ShardRead& r = files[s.file][&s];
    r.shard = &s;
    r.dataset = name;
    const uint64_t src = uint64_t(src_elem) * sizeof(float), len = uint64_t(n) * sizeof(float);
    char* d = reinterpret_cast<char*>(dst);
    if (!r.copies.empty()) {  // rows that follow each other on both sides: one copy
      ckpt::Copy& last = r.copies.back();
      if (last.src + last.len == src && last.dst + last.len == d) {
        last.len += len;
        return;
      }
    }
    r.copies.push_back({src, len, d});
  }
};

}  // namespace

namespace {
// One load: the index, the files opened (each checked once), the /3 plan of
// block reads, and what was read.
class Loading {
 public:
  Loading(const std::string& step_dir, std::vector<ShardView>& want)
      : step_dir_(step_dir), idx_(ckpt::read_index(step_dir)), v3_(idx_.version >= 3) {
    r.path = step_dir;
    r.step = idx_.step;
    r.saved_world_size = idx_.world_size;
    r.layout = idx_.layout;
    r.scalars = idx_.scalars;
    for (const auto& [n, t] : idx_.tensors) names_.push_back(n);
    for (ShardView& w : want) tensor(w);
  }
  void read_planned();
  void read_rank_meta(int rank);
  LoadResult r;

 private:
  const ckpt::IndexRankFile& rank_file(const std::string& f) const;
  hid_t file(const std::string& f, int frank);
  h5::Handle open_shard(const ckpt::IndexShard& s, const std::string& name);
  void tensor(ShardView& w);
  void same_shape(const ckpt::IndexShard& s, ShardView& w, int64_t& covered);
  void reshaped(const ckpt::IndexShard& s, const Dims& gs, ShardView& w, int64_t& covered);

  const std::string step_dir_;
  const ckpt::Index idx_;
  const bool v3_;
  std::vector<std::string> names_;
  std::map<std::string, h5::Handle> files_;
  Plan plan_;
};

const ckpt::IndexRankFile& Loading::rank_file(const std::string& f) const {
  for (const auto& rf : idx_.files)
    if (rf.file == f) return rf;
  throw Error("not listed in index.json");  // read_index refuses such an index
}

hid_t Loading::file(const std::string& f, int frank) {
  auto it = files_.find(f);
  if (it == files_.end()) {
    const std::string path = (fs::path(step_dir_) / f).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw Error("missing or not a regular file");
    const ckpt::IndexRankFile& rf = rank_file(f);
    if (int64_t(fs::file_size(path, ec)) != rf.file_bytes)
      throw Error(detail::cat("size ", fs::file_size(path, ec), " bytes but index.json says ",
                              rf.file_bytes, " (truncated or changed)"));
    if (v3_) {  // HDF5 parses only metadata that matches its CRC32C
      const std::string why = check_meta(path, rf);
      if (!why.empty()) throw Error(why);
    }
    h5::Handle h = h5::open_file_readonly(path);
    check_binding(h, idx_, frank);
    it = files_.emplace(f, std::move(h)).first;
  }
  return it->second;
}

// Opens a saved shard's dataset and checks its shape (and, /3, where its
// bytes are) against the index.
h5::Handle Loading::open_shard(const ckpt::IndexShard& s, const std::string& name) {
  h5::Handle d(ST_HDF5_CHECK(H5Dopen2(file(s.file, s.rank), name.c_str(), H5P_DEFAULT)));
  const Dims shape = h5::dataset_shape(d);
  if (shape != s.shape)
    throw Error(
        detail::cat("shape ", json(shape).dump(), " but index.json says ", json(s.shape).dump()));
  if (v3_) check_storage(d, s);
  return d;
}

// A saved shard of the same global shape: the box where it and the wanted
// slice overlap.
void Loading::same_shape(const ckpt::IndexShard& s, ShardView& w, int64_t& covered) {
  const Dims& gs = w.global_shape;
  const Dims& soff = s.offset;
  const Dims& sshape = s.shape;
  Plan& plan = plan_;
  const bool v3 = v3_;
  size_t nd = gs.size();
  Dims lo(nd), cnt(nd);
  bool empty = false;
  for (size_t i = 0; i < nd; ++i) {
    lo[i] = std::max(soff[i], w.offset[i]);
    int64_t hi = std::min(soff[i] + sshape[i], w.offset[i] + w.shape[i]);
    cnt[i] = hi - lo[i];
    empty |= cnt[i] <= 0;
  }
  if (empty) return;
  h5::Handle d = open_shard(s, w.name);
  const int64_t n = ckpt::numel(cnt);
  covered += n;
  r.bytes_read += n * int64_t(sizeof(float));
  if (v3) {  // row runs of the box, copied as their CRC blocks are read
    Dims src(nd), dst(nd);
    for_rows(cnt, [&](const Dims& k) {
      for (size_t i = 0; i < nd; ++i) {
        src[i] = lo[i] - soff[i] + k[i];
        dst[i] = lo[i] - w.offset[i] + k[i];
      }
      plan.copy(s, w.name, ravel(src, sshape), cnt.back(), w.data + ravel(dst, w.shape));
    });
    if (cnt == sshape) r.datasets_verified++;
    return;
  }
  read_box(d, soff, lo, cnt, w);
  if (cnt == sshape) {  // the whole saved dataset: verify its checksum
    if (box_crc(w, soff, sshape) != s.checksum)
      throw Error(detail::cat("checksum mismatch: index.json says ", s.checksum, ", data ",
                              box_crc(w, soff, sshape)));
    r.datasets_verified++;
  }
}

// Different shapes, same element count: match flat row-major ranges.
void Loading::reshaped(const ckpt::IndexShard& s, const Dims& gs, ShardView& w, int64_t& covered) {
  const Dims& soff = s.offset;
  const Dims& sshape = s.shape;
  Plan& plan = plan_;
  const bool v3 = v3_;
  if (ckpt::numel(sshape) == 0) return;
  h5::Handle d = open_shard(s, w.name);  // its shape bounds the runs below
  auto wr = flat_runs(w.global_shape, w.offset, w.shape, true);
  auto sr = flat_runs(gs, soff, sshape, false);
  size_t i = 0, k = 0;
  while (i < wr.size() && k < sr.size()) {
    int64_t a = std::max(wr[i].first, sr[k].first), b = std::min(wr[i].second, sr[k].second);
    if (a < b) {
      Dims src = unravel(a, gs), dst = unravel(a, w.global_shape);
      for (size_t q = 0; q < src.size(); ++q) src[q] -= soff[q];
      for (size_t q = 0; q < dst.size(); ++q) dst[q] -= w.offset[q];
      if (v3)
        plan.copy(s, w.name, ravel(src, sshape), b - a, w.data + ravel(dst, w.shape));
      else
        read_run(d, src, b - a, w.data + ravel(dst, w.shape));
      covered += b - a;
      r.bytes_read += (b - a) * int64_t(sizeof(float));
    }
    if (wr[i].second < sr[k].second)
      ++i;
    else
      ++k;
  }
}

void Loading::tensor(ShardView& w) {
  auto found = idx_.tensors.find(w.name);
  if (found == idx_.tensors.end()) {
    std::string c = closest(w.name, names_);
    throw UsageError("checkpoint '" + step_dir_ + "' has no tensor '" + w.name + "'" +
                     (c.empty() ? "" : " (did you mean '" + c + "'?)"));
  }
  const ckpt::IndexTensor& t = found->second;
  const Dims& gs = t.global_shape;
  const bool same = gs == w.global_shape;
  ST_USAGE_CHECK(same || ckpt::numel(gs) == ckpt::numel(w.global_shape), "checkpoint tensor '",
                 w.name, "' has global shape ", json(gs).dump(), "; cannot load it as ",
                 json(w.global_shape).dump());
  int64_t covered = 0;
  for (const ckpt::IndexShard& s : t.shards) {
    try {
      if (same)
        same_shape(s, w, covered);
      else
        reshaped(s, gs, w, covered);
    } catch (const std::exception& e) {
      throw Error("'" + (fs::path(step_dir_) / s.file).string() + "', dataset '" + w.name +
                  "': " + e.what());
    }
  }
  if (covered != ckpt::numel(w.shape))
    throw UsageError(detail::cat("checkpoint '", step_dir_, "': tensor '", w.name,
                                 "': saved shards cover ", covered, " of the ",
                                 ckpt::numel(w.shape), " requested elements"));
}

// /3: each file's blocks, once, in file order.
void Loading::read_planned() {
  for (auto& [fname, by_shard] : plan_.files) {
    const std::string path = (fs::path(step_dir_) / fname).string();
    std::vector<ckpt::ShardRead> reads;
    for (auto& [s, rd] : by_shard) reads.push_back(std::move(rd));
    try {
      r.bytes_from_disk += ckpt::read_shards(path, rank_file(fname).block_bytes, reads);
    } catch (const std::exception& e) {
      throw Error("'" + path + "', " + e.what());
    }
  }
}

// The rank's own scalars and RNG state, when it was a rank of the save.
void Loading::read_rank_meta(int rank) {
  if (rank < 0 || rank >= r.saved_world_size) return;
  std::string fname = ckpt::rank_file_name(rank);
  std::string path = (fs::path(step_dir_) / fname).string();
  hid_t f;
  try {
    f = file(fname, rank);
  } catch (const std::exception& e) {
    throw Error("'" + path + "': " + e.what());
  }
  auto sc = read_meta(f, path, ckpt::kScalarsDataset);
  try {
    r.rank_scalars = json::parse(std::string(sc.begin(), sc.end()));
  } catch (const json::exception& e) {
    throw Error("'" + path + "', dataset '" + ckpt::kScalarsDataset +
                "': not valid JSON: " + e.what());
  }
  r.rng = read_meta(f, path, ckpt::kRngDataset);
}
}  // namespace

LoadResult load(const std::string& step_dir, std::vector<ShardView>& want, int rank) {
  h5::quiet_errors();
  const double t0 = wall_time();
  Loading l(step_dir, want);
  l.read_planned();
  l.read_rank_meta(rank);
  l.r.seconds = wall_time() - t0;
  return std::move(l.r);
}

}  // namespace st
