// Implementation of block_read.hpp: the plan (which CRC blocks, which copies
// out of each), the reads (consecutive blocks joined into one pread of up to
// 8 MiB), and two reader threads, each a read ahead of the checks.
#include "checkpoint/block_read.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "core/crc32c.hpp"
#include "core/error.hpp"

namespace st::ckpt {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kGapMax = uint64_t(1) << 20;  // join blocks fewer bytes apart into one read
constexpr int kReaders = 2;                      // reader threads: reads in flight at once
constexpr int kSlots = 4;  // buffers: each reader one read ahead of the checks

uint64_t round_down(uint64_t x) { return x / kPage * kPage; }
uint64_t round_up(uint64_t x) { return (x + kPage - 1) / kPage * kPage; }

// Bytes of a block to copy out: `len` from byte `at` of the block to `dst`.
struct Piece {
  uint64_t at = 0, len = 0;
  char* dst = nullptr;
};

// One CRC block of one shard: where it lies in the file, its CRC, what to copy out.
struct Block {
  uint64_t off = 0, len = 0;
  uint32_t crc = 0;
  const ShardRead* from = nullptr;
  uint64_t index = 0;  // within the shard
  std::vector<Piece> pieces;
};

// One pread: the page-aligned file range [a, b) holding blocks [first, last).
struct Read {
  uint64_t a = 0, b = 0;
  size_t first = 0, last = 0;
};

std::vector<Block> plan(const std::vector<ShardRead>& reads, uint64_t bb) {
  std::vector<Block> blocks;
  for (const ShardRead& r : reads) {
    const IndexShard& s = *r.shard;
    const uint64_t total = uint64_t(numel(s.shape)) * sizeof(float);
    std::vector<long> at(s.block_crcs.size(), -1);  // block k -> its place in `blocks`
    auto block = [&](uint64_t k) -> Block& {
      if (at[k] < 0) {
        at[k] = long(blocks.size());
        blocks.push_back(
            {s.file_offset + k * bb, std::min(bb, total - k * bb), s.block_crcs[k], &r, k, {}});
      }
      return blocks[size_t(at[k])];
    };
    if (r.all)
      for (uint64_t k = 0; k < at.size(); ++k) block(k);
    for (const Copy& c : r.copies) {
      if (c.len == 0) continue;
      if (c.src + c.len > total)
        throw Error("a copy of bytes " + std::to_string(c.src) + "+" + std::to_string(c.len) +
                    " lies outside the shard's " + std::to_string(total) + " bytes");
      for (uint64_t k = c.src / bb; k <= (c.src + c.len - 1) / bb; ++k) {
        const uint64_t a = std::max(c.src, k * bb), e = std::min(c.src + c.len, (k + 1) * bb);
        block(k).pieces.push_back({a - k * bb, e - a, c.dst + (a - c.src)});
      }
    }
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& x, const Block& y) { return x.off < y.off; });
  return blocks;
}

std::vector<Read> group(const std::vector<Block>& blocks, uint64_t cap) {
  std::vector<Read> out;
  for (size_t i = 0; i < blocks.size();) {
    Read r{round_down(blocks[i].off), round_up(blocks[i].off + blocks[i].len), i, i + 1};
    while (r.last < blocks.size()) {
      const Block& n = blocks[r.last];
      const uint64_t b = std::max(r.b, round_up(n.off + n.len));
      if (n.off > r.b + kGapMax || b - r.a > cap) break;
      r.b = b;
      ++r.last;
    }
    out.push_back(r);
    i = r.last;
  }
  return out;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// The file opened for reading: O_DIRECT when the file system takes it (a
// file system that refuses it, at open or at the first read, is read
// buffered with sequential read-ahead).
class Source {
 public:
  explicit Source(const std::string& path) : path_(path) {
    direct_ = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    buffered_ = ::open(path.c_str(), O_RDONLY);
    if (buffered_ < 0) {
      const int err = errno;
      if (direct_ >= 0) ::close(direct_);
      throw Error("cannot open '" + path + "': " + std::strerror(err));
    }
    ::posix_fadvise(buffered_, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  ~Source() {
    if (direct_ >= 0) ::close(direct_);
    ::close(buffered_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // Reads [a, b) into `buf` (page-aligned); returns "" or why not. Bytes
  // past the end of the file are not there to read: `need` is how many must be.
  std::string read(char* buf, uint64_t a, uint64_t b, uint64_t need) {
    uint64_t got = 0;
    while (got < need) {
      const int fd = direct_ >= 0 ? direct_ : buffered_;
      const ssize_t n = ::pread(fd, buf + got, size_t(b - a - got), off_t(a + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && fd == direct_) {  // O_DIRECT refused at read time
        ::close(direct_);
        direct_ = -1;
        continue;
      }
      if (n < 0) return "reading at byte " + std::to_string(a + got) + ": " + std::strerror(errno);
      if (n == 0)
        return "unexpected end of file at byte " + std::to_string(a + got) + " (truncated)";
      got += uint64_t(n);
      if (fd == direct_ && got % kPage != 0 && got < need)  // a short O_DIRECT read mid-file
        return "short read at byte " + std::to_string(a + got);
    }
    return "";
  }

 private:
  std::string path_;
  int direct_ = -1, buffered_ = -1;
};

// kReaders reader threads filling kSlots buffers with `reads` (reader t
// takes reads t, t + kReaders, ...), each waited for in order by the
// checking thread through take() and handed back by give().
class Pipeline {
 public:
  Pipeline(Source& src, const std::vector<Read>& reads, const std::vector<Block>& blocks,
           uint64_t cap)
      : src_(src), reads_(reads), blocks_(blocks) {
    for (auto& s : slots_) {
      s.buf.reset(static_cast<char*>(std::aligned_alloc(kPage, round_up(cap))));
      if (!s.buf) throw Error("out of memory for a " + std::to_string(cap) + "-byte read buffer");
    }
    for (int t = 0; t < kReaders; ++t) threads_.emplace_back([this, t] { run(t); });
  }
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The buffer holding read i (throws the reader's error).
  const char* take(size_t i) {
    Slot& s = slots_[i % kSlots];
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return s.full && s.read == i; });
    if (!s.error.empty()) throw Error(s.error);
    return s.buf.get();
  }
  void give(size_t i) {
    {
      std::lock_guard<std::mutex> g(mu_);
      slots_[i % kSlots].full = false;
    }
    cv_.notify_all();
  }

 private:
  struct Slot {
    std::unique_ptr<char, FreeDeleter> buf;
    size_t read = 0;
    bool full = false;
    std::string error;
  };

  void run(int t) {
    for (size_t i = size_t(t); i < reads_.size(); i += kReaders) {
      Slot& s = slots_[i % kSlots];
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !s.full; });
        if (stop_) return;
      }
      const Read& r = reads_[i];
      const Block& last = blocks_[r.last - 1];
      std::string err = src_.read(s.buf.get(), r.a, r.b, last.off + last.len - r.a);
      {
        std::lock_guard<std::mutex> g(mu_);
        s.read = i;
        s.full = true;
        s.error = std::move(err);
      }
      cv_.notify_all();
      if (!s.error.empty()) return;
    }
  }

  Source& src_;
  const std::vector<Read>& reads_;
  const std::vector<Block>& blocks_;
  Slot slots_[kSlots];
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The block's CRC32C, and its pieces copied out, a cache-sized stretch at
// a time: each stretch is checksummed and then copied while it is still in
// the core's cache, so the block crosses the memory bus once, not twice. A
// mismatch is found after the copies: the caller throws, and a failed load
// leaves its destinations unused.
uint32_t check_and_copy(const char* p, const Block& b) {
  constexpr uint64_t kStretch = uint64_t(192) << 10;
  uint32_t crc = 0;
  for (uint64_t at = 0; at < b.len; at += kStretch) {
    const uint64_t end = std::min(b.len, at + kStretch);
    crc = crc32c_update(crc, p + at, size_t(end - at));
    for (const Piece& pc : b.pieces) {
      const uint64_t a = std::max(at, pc.at), e = std::min(end, pc.at + pc.len);
      if (a < e) std::memcpy(pc.dst + (a - pc.at), p + a, size_t(e - a));
    }
  }
  return crc;
}

}  // namespace

// CRC32C of bytes [a, b) of the file: runs the file system reports as
// holes (alignment padding never written) are zeros, checksummed without
// reading them; the rest is read (HDF5's metadata, from the page cache).
uint32_t crc32c_range(int fd, uint64_t a, uint64_t b, uint32_t crc, std::vector<char>& buf,
                      const std::string& path) {
  while (a < b) {
    // ENXIO: a hole up to the end; any other error: no hole information,
    // so everything is read.
    off_t data = ::lseek(fd, off_t(a), SEEK_DATA);
    if (data < 0 && errno != ENXIO) data = off_t(a);
    const uint64_t d = data < 0 ? b : std::min<uint64_t>(uint64_t(data), b);
    if (d > a) {  // a hole: zeros
      crc = crc32c_zeros(crc, d - a);
      a = d;
      continue;
    }
    off_t hole = ::lseek(fd, off_t(a), SEEK_HOLE);
    const uint64_t e =
        hole < 0 ? b : std::min<uint64_t>(std::max<uint64_t>(uint64_t(hole), a + 1), b);
    for (; a < e;) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), e - a));
      const ssize_t r = ::pread(fd, buf.data(), n, off_t(a));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw Error("reading back '" + path + "' at byte " + std::to_string(a) + ": " +
                    (r < 0 ? std::strerror(errno) : "unexpected end of file"));
      crc = crc32c_update(crc, buf.data(), size_t(r));
      a += uint64_t(r);
    }
  }
  return crc;
}

uint32_t meta_crc32c(const std::string& path, uint64_t size,
                     const std::vector<std::pair<uint64_t, uint64_t>>& extents) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<char> buf(size_t(64) << 10);
  uint32_t crc = 0;
  uint64_t pos = 0;
  try {
    for (const auto& [off, len] : extents) {
      crc = crc32c_range(fd, pos, std::min(off, size), crc, buf, path);
      pos = std::max(pos, off + len);
    }
    crc = crc32c_range(fd, std::min(pos, size), size, crc, buf, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return crc;
}

int64_t read_shards(const std::string& path, uint64_t block_bytes,
                    const std::vector<ShardRead>& reads) {
  const std::vector<Block> blocks = plan(reads, block_bytes);
  if (blocks.empty()) return 0;
  const uint64_t cap = std::max<uint64_t>(block_bytes, uint64_t(8) << 20) + 2 * kPage;
  const std::vector<Read> rds = group(blocks, cap);
  Source src(path);
  Pipeline pipe(src, rds, blocks, cap);
  int64_t bytes = 0;
  for (size_t i = 0; i < rds.size(); ++i) {
    const Read& r = rds[i];
    const char* buf = pipe.take(i);
    for (size_t k = r.first; k < r.last; ++k) {
      const Block& b = blocks[k];
      const char* p = buf + (b.off - r.a);
      const uint32_t crc = check_and_copy(p, b);
      if (crc != b.crc)
        throw Error("dataset '" + b.from->dataset + "': block " + std::to_string(b.index) +
                    " (file bytes " + std::to_string(b.off) + "-" + std::to_string(b.off + b.len) +
                    "): checksum mismatch: index.json says " + std::to_string(b.crc) + ", data " +
                    std::to_string(crc));
      bytes += int64_t(b.len);
    }
    pipe.give(i);
  }
  return bytes;
}

}  // namespace st::ckpt
