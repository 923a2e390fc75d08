// Implementation of storage_probe.hpp: timed sequential writes (4 MiB
// pwrites of incompressible bytes, then fdatasync) and cold reads of
// probe files in the checkpoint folder.
#include "checkpoint/storage_probe.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st {
namespace {
constexpr size_t kBlock = size_t(4) << 20;

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using Block = std::unique_ptr<char, AlignedFree>;

Block make_block(int seed) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, kBlock) != 0) throw std::bad_alloc();
  Block b(static_cast<char*>(p));
  uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(seed + 1);
  for (size_t i = 0; i < kBlock; i += 8) {  // xorshift: no file system compresses it away
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(b.get() + i, &x, 8);
  }
  return b;
}

class File {
 public:
  File(const std::string& path, int flags) : fd_(::open(path.c_str(), flags, 0644)), path_(path) {}
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }
  [[noreturn]] void fail(const char* what) const {
    throw Error(std::string("storage probe: ") + what + " '" + path_ +
                "': " + std::strerror(errno));
  }

 private:
  int fd_;
  std::string path_;
};

// Writes `bytes` and fdatasyncs; returns the seconds.
double timed_write(const std::string& path, int64_t bytes, const Block& b) {
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  if (f.fd() < 0) f.fail("cannot create");
  const double t0 = wall_time();
  for (int64_t done = 0; done < bytes;) {
    const size_t n = size_t(std::min<int64_t>(int64_t(kBlock), bytes - done));
    const ssize_t w = ::pwrite(f.fd(), b.get(), n, off_t(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) f.fail("cannot write");
    done += w;
  }
  if (::fdatasync(f.fd()) != 0) f.fail("cannot fdatasync");
  return wall_time() - t0;
}

// Reads the file cold: O_DIRECT where the file system takes it, else its
// cached pages dropped first. Returns the seconds; `method` says which.
double timed_cold_read(const std::string& path, int64_t bytes, Block& b, std::string& method) {
  File direct(path, O_RDONLY | O_DIRECT);
  bool use_direct = direct.fd() >= 0;
  File buffered(path, O_RDONLY);
  if (!use_direct) {
    if (buffered.fd() < 0) buffered.fail("cannot open");
    ::posix_fadvise(buffered.fd(), 0, 0, POSIX_FADV_DONTNEED);
  }
  int fd = use_direct ? direct.fd() : buffered.fd();
  method = use_direct ? "O_DIRECT" : "fadvise DONTNEED";
  const double t0 = wall_time();
  for (int64_t done = 0; done < bytes;) {
    const ssize_t r = ::pread(fd, b.get(), kBlock, off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EINVAL && use_direct && done == 0 && buffered.fd() >= 0) {
      use_direct = false;  // O_DIRECT refused at the read, not at the open
      ::posix_fadvise(buffered.fd(), 0, 0, POSIX_FADV_DONTNEED);
      fd = buffered.fd();
      method = "fadvise DONTNEED";
      continue;
    }
    if (r <= 0) (use_direct ? direct : buffered).fail("cannot read");
    done += r;
  }
  return wall_time() - t0;
}

double slowest(MpiCommunicator& node, double s) {
  node.all_reduce_max(&s, 1);
  return s;
}

std::string probe_path(const std::string& dir, int world_rank) {
  return (std::filesystem::path(dir) /
          (".storage-probe.rank_" + std::to_string(world_rank) + ".bin"))
      .string();
}
}  // namespace

double probe_node_write(const std::string& dir, int64_t bytes_each, int world_rank,
                        MpiCommunicator& node) {
  const std::string path = probe_path(dir, world_rank);
  const Block b = make_block(world_rank);
  std::string error;
  double s = 0;
  node.barrier();
  try {
    s = timed_write(path, bytes_each, b);
  } catch (const std::exception& e) {
    error = e.what();
  }
  s = slowest(node, s);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (!error.empty()) throw Error(error);
  return s > 0 ? double(bytes_each) * node.size() / s : 0;
}

int64_t probe_bytes_each(int64_t bytes, int ranks, int64_t largest_save) {
  bytes = std::max<int64_t>(bytes, kBlock);
  if (largest_save < 0 || ranks <= 0) return bytes;
  const int64_t floor = std::max<int64_t>((bytes + ranks - 1) / ranks, int64_t(1) << 20);
  return std::min(bytes, std::max(floor, largest_save));
}

StorageProbe probe_storage(const std::string& dir, int64_t bytes, int world_rank,
                           MpiCommunicator& node, int64_t save_bytes) {
  StorageProbe p;
  p.dir = dir;
  p.writers = node.size();
  const double t0 = wall_time();
  const std::string path = probe_path(dir, world_rank);
  Block b = make_block(world_rank);
  p.bytes_one = std::max<int64_t>(bytes, kBlock);
  double largest = double(save_bytes);
  node.all_reduce_max(&largest, 1);  // every rank passes it or none does
  p.bytes_each = probe_bytes_each(bytes, node.size(), int64_t(largest));
  // An I/O error skips this rank's later measurements, never a collective
  // (the node's other ranks would wait for it); it is thrown at the end.
  std::string error;
  auto timed = [&error](auto f) -> double {
    if (!error.empty()) return 0;
    try {
      return f();
    } catch (const std::exception& e) {
      error = e.what();
      return 0;
    }
  };
  double w1 = 0, r1 = 0;
  node.barrier();
  if (node.rank() == 0) {
    w1 = timed([&] { return timed_write(path, p.bytes_one, b); });
    r1 = timed([&] { return timed_cold_read(path, p.bytes_one, b, p.read_method); });
  }
  node.barrier();
  const double wa = slowest(node, timed([&] { return timed_write(path, p.bytes_each, b); }));
  node.barrier();
  const double ra =
      slowest(node, timed([&] { return timed_cold_read(path, p.bytes_each, b, p.read_method); }));
  node.broadcast_bytes(&w1, sizeof w1, 0);
  node.broadcast_bytes(&r1, sizeof r1, 0);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (!error.empty()) throw Error(error);
  p.write_one_Bps = w1 > 0 ? double(p.bytes_one) / w1 : 0;
  p.read_one_Bps = r1 > 0 ? double(p.bytes_one) / r1 : 0;
  const double all = double(p.bytes_each) * p.writers;
  p.write_all_Bps = wa > 0 ? all / wa : 0;
  p.read_all_Bps = ra > 0 ? all / ra : 0;
  p.seconds = wall_time() - t0;
  return p;
}

nlohmann::json StorageProbe::to_json() const {
  return {{"dir", dir},
          {"writers", writers},
          {"bytes_one", bytes_one},
          {"bytes_each", bytes_each},
          {"write_one_Bps", write_one_Bps},
          {"read_one_Bps", read_one_Bps},
          {"write_all_Bps", write_all_Bps},
          {"read_all_Bps", read_all_Bps},
          {"read_method", read_method},
          {"seconds", seconds}};
}

std::string StorageProbe::describe() const {
  auto mibs = [](double bps) { return detail::cat(int64_t(bps / 1048576.0 + 0.5), " MiB/s"); };
  return detail::cat("storage probe of ", dir, ": write (fdatasync) ", mibs(write_one_Bps),
                     " by 1 writer, ", mibs(write_all_Bps), " by ", writers, "; cold read (",
                     read_method, ") ", mibs(read_one_Bps), " by 1, ", mibs(read_all_Bps), " by ",
                     writers, " (", human_bytes(double(bytes_one)), " + ", writers, " x ",
                     human_bytes(double(bytes_each)), ", ", seconds, " s)");
}

double expected_write_s(const StorageProbe& p, double bytes_per_node) {
  return p.write_all_Bps > 0 ? bytes_per_node / p.write_all_Bps : 0;
}

}  // namespace st
