// Implementation of rank_file.hpp: writes one dataset per shard (contiguous,
// float32 little-endian) with global_shape/offset/checksum/dtype attributes;
// HDF5 lays the file out, the data goes in by large pwrites checksummed on
// the way (docs/checkpoint-format.md, "Writing at the storage's speed").
#include "checkpoint/rank_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint/block_read.hpp"
#include "checkpoint/h5.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st::ckpt {

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.h5", rank);
  return buf;
}

int64_t ShardOut::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open '" + path + "' to fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("fsync of '" + path + "' failed: " + std::strerror(err));
}

WriteTuning& write_tuning() {
  static WriteTuning t;
  return t;
}

namespace {
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the writer stores native floats as IEEE float32 little-endian");

// A dataset's place in the file, the CRC32C of its bytes and of each
// kCrcBlock of them.
struct Extent {
  uint64_t off = 0, len = 0;
  uint32_t crc = 0;
  std::vector<uint32_t> blocks;
};

// The extent's CRC32C assembled from its blocks' (no byte read again).
uint32_t combine_blocks(const std::vector<uint32_t>& blocks, uint64_t len) {
  uint32_t crc = 0;
  for (size_t b = 0; b < blocks.size(); ++b)
    crc = crc32c_combine(crc, blocks[b], std::min<uint64_t>(kCrcBlock, len - b * kCrcBlock));
  return crc;
}

// Block CRCs of bytes in memory (the H5Dwrite variant, which never sees them per block).
std::vector<uint32_t> block_crcs(const char* p, uint64_t len) {
  std::vector<uint32_t> out;
  for (uint64_t a = 0; a < len; a += kCrcBlock)
    out.push_back(crc32c(p + a, size_t(std::min<uint64_t>(kCrcBlock, len - a))));
  return out;
}

// An fd of the file being written, for the data's pwrites beside HDF5's own.
class Fd {
 public:
  // required=false: a file system that refuses `flags` (O_DIRECT) leaves it
  // closed (get() < 0) instead of throwing.
  Fd(const std::string& path, int flags, bool required = true) : fd_(::open(path.c_str(), flags)) {
    if (fd_ < 0 && required) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

h5::Handle create_aligned(const std::string& path, const WriteTuning& wt) {
  h5::Handle fapl(ST_HDF5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  if (wt.align > 1) ST_HDF5_CHECK(H5Pset_alignment(fapl, wt.align_threshold, wt.align));
  if (wt.meta_block > 0) ST_HDF5_CHECK(H5Pset_meta_block_size(fapl, wt.meta_block));
  return h5::Handle(ST_HDF5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl)));
}

// A dataset whose contiguous storage is allocated now and never filled by
// HDF5 (the writer's pwrite fills it), with its shape attributes.
h5::Handle create_dataset(hid_t file, hid_t lcpl, const ShardOut& s) {
  std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
  h5::Handle space(ST_HDF5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
  h5::Handle dcpl(ST_HDF5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  ST_HDF5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
  ST_HDF5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  ST_HDF5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  h5::Handle d(ST_HDF5_CHECK(
      H5Dcreate2(file, s.name.c_str(), H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT)));
  h5::write_attr_i64(d, "global_shape", s.global_shape);
  h5::write_attr_i64(d, "offset", s.offset);
  h5::write_attr_str(d, "dtype", "float32");
  return d;
}

void pwrite_all(int fd, const char* p, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, off_t(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw Error("writing '" + path + "' at byte " + std::to_string(off) + ": " +
                  (w < 0 ? std::strerror(errno) : "no progress"));
    p += w;
    n -= size_t(w);
    off += uint64_t(w);
  }
}

// Where a dataset's bytes go: the buffered fd, and an O_DIRECT one for
// 4 KiB-aligned blocks when asked for and the file system takes it.
struct Sink {
  int fd = -1, direct = -1;
  uint64_t since_wb = 0;
};

// One dataset's bytes: each kCrcBlock checksummed (its CRC goes to the
// index), then written in `wt.block` pieces while it is still in the cache;
// write-back started every `writeback` bytes so the final fsync finds
// little left to do. Returns the blocks' CRC32Cs.
std::vector<uint32_t> write_extent(Sink& sink, const char* p, uint64_t off, uint64_t len,
                                   const WriteTuning& wt, const std::string& path) {
  constexpr uint64_t kPage = 4096;
  std::vector<uint32_t> crcs;
  const size_t piece = std::max<size_t>(wt.block, kPage) / kPage * kPage;
  const bool aligned = sink.direct >= 0 && off % kPage == 0 && uintptr_t(p) % kPage == 0;
  for (uint64_t b0 = 0; b0 < len; b0 += kCrcBlock) {
    const uint64_t b1 = std::min<uint64_t>(b0 + kCrcBlock, len);
    uint32_t crc = 0;
    for (uint64_t done = b0; done < b1;) {
      size_t n = size_t(std::min<uint64_t>(piece, b1 - done));
      const bool direct = aligned && n >= kPage;
      if (direct) n = n / kPage * kPage;  // the tail (< 4 KiB) goes buffered
      crc = crc32c_update(crc, p + done, n);
      pwrite_all(direct ? sink.direct : sink.fd, p + done, n, off + done, path);
      done += n;
      sink.since_wb += direct ? 0 : n;
      if (wt.writeback && sink.since_wb >= wt.writeback) {
        ::sync_file_range(sink.fd, 0, 0, SYNC_FILE_RANGE_WRITE);  // a hint: errors surface at fsync
        sink.since_wb = 0;
      }
    }
    crcs.push_back(crc);
  }
  return crcs;
}

// The whole file's CRC32C from the data extents' CRCs (combined, not read)
// and HDF5's bytes between them (read back), and `meta`: the CRC32C of those
// in-between bytes alone (index.json's meta_crc32c).
uint32_t file_crc(const std::string& path, std::vector<Extent> ext, int64_t& size, uint32_t& meta) {
  Fd fd(path, O_RDONLY);
  struct stat stt {};
  if (::fstat(fd.get(), &stt) != 0)
    throw Error("cannot stat '" + path + "': " + std::strerror(errno));
  size = int64_t(stt.st_size);
  std::sort(ext.begin(), ext.end(), [](const Extent& x, const Extent& y) { return x.off < y.off; });
  std::vector<char> buf(size_t(64) << 10);
  uint32_t crc = 0;
  meta = 0;
  uint64_t pos = 0;
  auto gap = [&](uint64_t a, uint64_t b) {
    const uint32_t g = crc32c_range(fd.get(), a, b, 0, buf, path);
    crc = crc32c_combine(crc, g, b - a);
    meta = crc32c_combine(meta, g, b - a);
  };
  for (const Extent& e : ext) {
    if (e.off < pos || e.off + e.len > uint64_t(size))
      throw Error("'" + path + "': a dataset's storage at byte " + std::to_string(e.off) +
                  " overlaps another or lies beyond the end of the file");
    gap(pos, e.off);
    crc = crc32c_combine(crc, e.crc, e.len);
    pos = e.off + e.len;
  }
  gap(pos, uint64_t(size));
  return crc;
}
}  // namespace

// Phases: create, the datasets' metadata (storage allocated), the data in
// one checksum-and-write pass, the checksum attributes and close, the
// file's CRC32C, one fsync.
RankFileOut write_rank_file(const std::string& path, long step, int rank, int world,
                            const std::vector<ShardOut>& shards, const std::string& scalars,
                            const std::vector<uint8_t>& rng,
                            const std::function<void(const std::string&)>& hook) {
  RankFileOut out;
  PhaseClock clock;
  const WriteTuning wt = write_tuning();
  h5::quiet_errors();
  std::vector<Extent> ext(shards.size());
  try {
    h5::Handle file = create_aligned(path, wt);
    h5::write_attr_str(file, "format", kFormat);
    h5::write_attr_i64(file, "step", {step});
    h5::write_attr_i64(file, "rank", {rank});
    h5::write_attr_i64(file, "world_size", {world});
    h5::write_attr_str(file, "checksum_algo", "crc32c");
    clock.mark("h5_create");

    h5::Handle lcpl(ST_HDF5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
    ST_HDF5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    std::vector<h5::Handle> dsets;
    for (size_t i = 0; i < shards.size(); ++i) {
      dsets.push_back(create_dataset(file, lcpl, shards[i]));
      ext[i].len = uint64_t(shards[i].numel()) * sizeof(float);
      if (ext[i].len) {
        const haddr_t a = H5Dget_offset(dsets[i]);
        if (a == HADDR_UNDEF) throw Error("dataset '" + shards[i].name + "' has no storage offset");
        ext[i].off = uint64_t(a);
      }
    }
    clock.mark("h5_datasets");

    if (wt.h5_write) {
      for (size_t i = 0; i < shards.size(); ++i) {
        ext[i].blocks = block_crcs(reinterpret_cast<const char*>(shards[i].data), ext[i].len);
        ext[i].crc = combine_blocks(ext[i].blocks, ext[i].len);
        if (ext[i].len)
          ST_HDF5_CHECK(
              H5Dwrite(dsets[i], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, shards[i].data));
        if (hook) hook("dataset");
      }
    } else {
      Fd fd(path, O_WRONLY);
      Fd direct(wt.direct ? path : std::string(), O_WRONLY | O_DIRECT, false);
      Sink sink{fd.get(), wt.direct ? direct.get() : -1, 0};
      for (size_t i = 0; i < shards.size(); ++i) {
        ext[i].blocks = write_extent(sink, reinterpret_cast<const char*>(shards[i].data),
                                     ext[i].off, ext[i].len, wt, path);
        ext[i].crc = combine_blocks(ext[i].blocks, ext[i].len);
        if (hook) hook("dataset");
      }
    }
    clock.mark("data");

    for (size_t i = 0; i < shards.size(); ++i) {
      const ShardOut& s = shards[i];
      h5::write_attr_u32(dsets[i], "checksum", ext[i].crc);
      dsets[i].close();
      out.bytes += int64_t(ext[i].len);
      out.entries.push_back({{"name", s.name},
                             {"global_shape", s.global_shape},
                             {"offset", s.offset},
                             {"shape", s.shape},
                             {"checksum", ext[i].crc},
                             {"file_offset", ext[i].off},
                             {"block_crc32c", ext[i].blocks}});
    }
    h5::write_bytes(file, kScalarsDataset, scalars.data(), scalars.size(),
                    crc32c(scalars.data(), scalars.size()));
    h5::write_bytes(file, kRngDataset, rng.data(), rng.size(), crc32c(rng.data(), rng.size()));
    lcpl.reset();
    ST_HDF5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    file.close();
    clock.mark("h5_close");
  } catch (const std::exception& e) {
    throw Error(std::string("writing '") + path + "': " + e.what());
  }
  std::erase_if(ext, [](const Extent& e) { return e.len == 0; });
  std::sort(ext.begin(), ext.end(), [](const Extent& x, const Extent& y) { return x.off < y.off; });
  for (const Extent& e : ext) out.extents.push_back({e.off, e.len});
  // The H5Dwrite variant reads the whole file back (what it did before
  // issue 53); its metadata CRC comes from the same extents.
  if (wt.h5_write) out.file_crc = crc32c_file(path, out.file_bytes);
  const uint32_t assembled = file_crc(path, std::move(ext), out.file_bytes, out.meta_crc);
  if (!wt.h5_write) out.file_crc = assembled;
  clock.mark("crc");
  fsync_path(path);
  clock.mark("fsync");
  out.phases = clock.phases();
  return out;
}

}  // namespace st::ckpt
