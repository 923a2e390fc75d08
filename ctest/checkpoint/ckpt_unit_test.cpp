// Single-process checkpoint tests: CRC32C vectors, step folder names,
// kill -9 at exact points of a save (via ckpt_helper), and reading a
// checkpoint with h5py. This process never initializes MPI.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/rank_file.hpp"
#include "checkpoint/storage_probe.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "test_state.hpp"

namespace fs = std::filesystem;
using namespace st;

namespace {
// CRC32C bit by bit, straight from the polynomial: the reference the
// hardware paths are held to.
uint32_t crc32c_bitwise(uint32_t crc, const unsigned char* p, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}
}  // namespace

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string s(1000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = char(i * 7);
  uint32_t part = crc32c_update(crc32c(s.data(), 333), s.data() + 333, s.size() - 333);
  EXPECT_EQ(part, crc32c(s.data(), s.size()));
}

// Long buffers are checksummed in three lanes side by side (24 KiB
// stretches) and joined: the same CRC as one byte at a time, for lengths
// around the stretch, unaligned starts and a running CRC carried in.
TEST(Crc32c, ThreeLanePathEqualsTheBitwiseCrc) {
  std::vector<unsigned char> buf(4 * 24576 + 64);
  uint32_t x = 12345;
  for (auto& b : buf) b = (unsigned char)((x = x * 1103515245u + 12345u) >> 23);
  for (size_t n : {size_t(24575), size_t(24576), size_t(24577), size_t(49152 + 13),
                   size_t(3 * 24576 + 7), size_t(4 * 24576)})
    for (size_t at : {size_t(0), size_t(1), size_t(5)}) {
      EXPECT_EQ(crc32c(buf.data() + at, n), crc32c_bitwise(0, buf.data() + at, n)) << n << "@" << at;
      EXPECT_EQ(crc32c_update(0xDEADBEEFu, buf.data() + at, n),
                crc32c_bitwise(0xDEADBEEFu, buf.data() + at, n))
          << n << "@" << at;
    }
}

// The file checksum is assembled from the pieces the writer checksummed as
// it wrote them: combining two pieces' CRCs gives the CRC of both, for any
// split, an empty piece on either side and a piece longer than 2^32 bytes'
// worth of shifts would need (the length only enters as a shift).
TEST(Crc32c, CombineEqualsTheWholeSCrc) {
  std::string s(100000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = char(i * 131 + (i >> 9));
  for (size_t cut : {size_t(0), size_t(1), size_t(9), size_t(4096), size_t(77777), s.size()}) {
    const uint32_t a = crc32c(s.data(), cut), b = crc32c(s.data() + cut, s.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, s.size() - cut), crc32c(s.data(), s.size())) << cut;
  }
  EXPECT_EQ(crc32c_combine(crc32c("12345", 5), crc32c("6789", 4), 4), 0xE3069283u);
  const std::string zeros(3 << 20, '\0');
  const uint32_t z = crc32c(zeros.data(), zeros.size());
  EXPECT_EQ(crc32c_combine(z, z, zeros.size()), crc32c_update(z, zeros.data(), zeros.size()));
  // Holes are checksummed as zeros without reading them.
  for (size_t n : {size_t(0), size_t(1), size_t(4096), zeros.size()})
    EXPECT_EQ(crc32c_zeros(0x1234567u, n), crc32c_update(0x1234567u, zeros.data(), n)) << n;
}

// A whole file's CRC32C read in pieces of a reused buffer (the writer keeps
// one: a fresh buffer per save cost the first saves their page faults) is
// the CRC32C of its bytes, for a file larger than the buffer and an empty one.
TEST(Crc32c, FileThroughAReusedBuffer) {
  const std::string dir = test::fresh_dir("crcfile");
  ASSERT_FALSE(dir.empty());
  std::string bytes((size_t(5) << 19) + 17, '\0');  // 2.5 MiB + 17: three 1 MiB pieces
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 131) ^ (i >> 9));
  const std::string path = dir + "/f.bin", empty = dir + "/e.bin";
  { std::ofstream(path, std::ios::binary) << bytes; }
  { std::ofstream(empty, std::ios::binary); }
  std::vector<char> buf;
  int64_t n = -1;
  EXPECT_EQ(crc32c_file(path, n, buf), crc32c(bytes.data(), bytes.size()));
  EXPECT_EQ(n, int64_t(bytes.size()));
  EXPECT_EQ(buf.size(), size_t(1) << 20);  // sized once, then reused
  const char* before = buf.data();
  EXPECT_EQ(crc32c_file(empty, n, buf), 0u);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(buf.data(), before);
  EXPECT_EQ(crc32c_file(path, n), crc32c(bytes.data(), bytes.size()));  // own buffer
  EXPECT_THROW(crc32c_file(dir + "/missing", n, buf), Error);
  fs::remove_all(dir);
}

// The writer's file CRC32C is assembled from the data it checksummed while
// writing and HDF5's metadata between the extents (holes as zeros): it must
// equal the CRC32C of the file read back whole, and every dataset must hold
// its shard's bytes, for each way of writing (aligned or not, buffered or
// O_DIRECT, the previous H5Dwrite writer), including an empty shard and
// one whose size is not a multiple of 4 KiB.
TEST(CheckpointWriter, FileChecksumWithoutReadBackMatchesTheFile) {
  const std::string dir = test::fresh_dir("writer");
  ASSERT_FALSE(dir.empty());
  std::vector<std::vector<float>> data = {std::vector<float>(1 << 20), std::vector<float>(1001),
                                          std::vector<float>(0), std::vector<float>(300000)};
  std::vector<ckpt::ShardOut> shards;
  for (size_t t = 0; t < data.size(); ++t) {
    for (size_t i = 0; i < data[t].size(); ++i) data[t][i] = float(t * 1000003 + i) * 0.5f;
    const int64_t n = int64_t(data[t].size());
    shards.push_back({"params/t" + std::to_string(t), {n}, {0}, {n}, data[t].data()});
  }
  const ckpt::WriteTuning saved = ckpt::write_tuning();
  int k = 0;
  for (const char* v : {"default", "no-align", "direct", "h5dwrite"}) {
    ckpt::WriteTuning t;
    if (std::string(v) == "no-align") t.align = 0;
    if (std::string(v) == "direct") t.direct = true;
    if (std::string(v) == "h5dwrite") t.h5_write = true;
    ckpt::write_tuning() = t;
    const std::string path = dir + "/rank_" + std::to_string(k++) + ".h5";
    const ckpt::RankFileOut out =
        ckpt::write_rank_file(path, 7, 0, 1, shards, "{\"step\":7}", {1, 2, 3}, nullptr);
    int64_t size = 0;
    EXPECT_EQ(out.file_crc, crc32c_file(path, size)) << v;
    EXPECT_EQ(out.file_bytes, size) << v;
    h5::Handle f = h5::open_file_readonly(path);
    for (size_t i = 0; i < data.size(); ++i) {
      h5::Handle d(H5Dopen2(f, shards[i].name.c_str(), H5P_DEFAULT));
      std::vector<float> back(data[i].size());
      if (!back.empty()) {
        ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
      }
      EXPECT_EQ(back, data[i]) << v << " " << shards[i].name;
      EXPECT_EQ(h5::read_attr_u32(d, "checksum"), crc32c(data[i].data(), data[i].size() * 4))
          << v << " " << shards[i].name;
    }
  }
  ckpt::write_tuning() = saved;
  fs::remove_all(dir);
}

TEST(CheckpointNames, StepDirs) {
  EXPECT_EQ(step_dir_name(42), "step_00000042");
  EXPECT_EQ(parse_step_dir("step_00000042"), 42);
  EXPECT_EQ(parse_step_dir("step_00000042.tmp"), -1);
  EXPECT_EQ(parse_step_dir("latest"), -1);
}

// The helper commits step 1, then is SIGKILLed at an exact point of step 2.
// Before the rename, step 1 must be chosen; after it, step 2 is committed
// even though `latest` still names step 1.
TEST(CheckpointKill, KillDuringSaveLeavesLastCommitted) {
  struct Case {
    const char* phase;
    long expect;
  } cases[] = {{"dataset", 1}, {"index_written", 1}, {"renamed", 2}};
  for (auto c : cases) {
    std::string dir = test::fresh_dir(std::string("kill_") + c.phase);
    int status = test::run({CKPT_HELPER, "kill", dir, c.phase});
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << c.phase << ": helper status " << status;
    if (c.expect == 1) {
      EXPECT_TRUE(fs::exists(dir + "/step_00000002.tmp")) << c.phase;
    }
    auto good = find_latest_good(dir);
    ASSERT_TRUE(good.has_value()) << c.phase;
    EXPECT_EQ(fs::path(*good).filename(), step_dir_name(c.expect)) << c.phase;
    auto v = test::layout(2, 1, false);
    auto want = test::views(v);
    LoadResult r = load(*good, want, 0);
    EXPECT_EQ(test::mismatches(v, c.expect), 0) << c.phase;
    EXPECT_EQ(r.rank_scalars["step"], c.expect);
    fs::remove_all(dir);
  }
}

TEST(CheckpointH5py, RankFilesReadableWithH5py) {
  const char* py = std::getenv("SCALETRAIN_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "SCALETRAIN_PYTHON not set";
  std::string dir = test::fresh_dir("h5py");
  ASSERT_EQ(test::run({CKPT_HELPER, "save", dir}), 0);
  int st = test::run({py, CKPT_H5PY_SCRIPT, dir + "/step_00000002"});
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77) GTEST_SKIP() << "h5py is not installed for " << py;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "check_h5py.py status " << st;
  fs::remove_all(dir);
}

// The storage probe's all-ranks phase writes what the node's saves write,
// within bounds: a node of many small ranks no longer writes ranks x probe_mb
// (128 ranks of the tiny model: 8 GiB, 17 s of start-up, for 0.16 MiB saves).
TEST(StorageProbe, EachRankWritesWhatItsSavesWriteWithinBounds) {
  constexpr int64_t MiB = int64_t(1) << 20;
  EXPECT_EQ(probe_bytes_each(64 * MiB, 2, -1), 64 * MiB);  // save size unknown: as before
  EXPECT_EQ(probe_bytes_each(64 * MiB, 2, 112 * MiB), 64 * MiB);   // large saves: probe_mb
  EXPECT_EQ(probe_bytes_each(64 * MiB, 16, 10 * MiB), 10 * MiB);   // the save's own size
  EXPECT_EQ(probe_bytes_each(64 * MiB, 8, 2 * MiB), 8 * MiB);      // the node writes probe_mb
  EXPECT_EQ(probe_bytes_each(64 * MiB, 128, 160 << 10), 1 * MiB);  // never below 1 MiB
  EXPECT_EQ(probe_bytes_each(1 * MiB, 1, 0), 4 * MiB);  // the single writer's 4 MiB floor
}
