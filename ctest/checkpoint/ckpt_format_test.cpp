// Format /3's restore path (docs/checkpoint-format.md, "Restoring cold"):
// the writer's block CRCs and metadata CRC, the block reader's copies across
// block boundaries and its refusal of a damaged block (naming it), the split
// verification (metadata before HDF5, data by the loader), and a committed
// format /2 checkpoint (written by scaletrain before /3) that must still load.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint/block_read.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/index.hpp"
#include "checkpoint/rank_file.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "test_state.hpp"

namespace fs = std::filesystem;
using namespace st;

namespace {

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(std::streamoff(at));
  char b = 0;
  io.read(&b, 1);
  b ^= 0x10;
  io.seekp(std::streamoff(at));
  io.write(&b, 1);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// A 2.5-block shard written by the writer: its block CRCs and the file's
// metadata CRC match the bytes on disk; copies that start, end and cross
// block boundaries come back bitwise; a flipped byte in block 1 fails only
// the reads that touch block 1, naming the dataset and the block.
TEST(CheckpointBlocks, CopiesAcrossBlocksAndRefusesADamagedBlock) {
  const std::string dir = test::fresh_dir("blocks");
  ASSERT_FALSE(dir.empty());
  const int64_t n = int64_t(ckpt::kCrcBlock / 4) * 5 / 2;  // 2.5 blocks of floats
  std::vector<float> big(static_cast<size_t>(n)), small(1001);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i) * 0.25f;
  for (size_t i = 0; i < small.size(); ++i) small[i] = -float(i);
  const std::vector<ckpt::ShardOut> shards = {{"params/big", {n}, {0}, {n}, big.data()},
                                              {"params/small", {1001}, {0}, {1001}, small.data()}};
  const std::string path = dir + "/rank_00000.h5";
  const ckpt::RankFileOut out =
      ckpt::write_rank_file(path, 3, 0, 1, shards, "{\"step\":3}", {1, 2}, nullptr);

  std::vector<std::pair<uint64_t, uint64_t>> ext;
  for (const auto& e : out.extents) ext.push_back({e[0].get<uint64_t>(), e[1].get<uint64_t>()});
  EXPECT_EQ(ckpt::meta_crc32c(path, uint64_t(out.file_bytes), ext), out.meta_crc);
  std::vector<ckpt::IndexShard> is(2);
  for (size_t i = 0; i < 2; ++i) {
    const auto& e = out.entries[i];
    is[i].shape = e["shape"].get<std::vector<int64_t>>();
    is[i].file_offset = e["file_offset"].get<uint64_t>();
    is[i].block_crcs = e["block_crc32c"].get<std::vector<uint32_t>>();
  }
  ASSERT_EQ(is[0].block_crcs.size(), 3u);
  const char* raw = reinterpret_cast<const char*>(big.data());
  for (size_t k = 0; k < 3; ++k) {
    const uint64_t len = std::min<uint64_t>(ckpt::kCrcBlock, uint64_t(n) * 4 - k * ckpt::kCrcBlock);
    EXPECT_EQ(is[0].block_crcs[k], crc32c(raw + k * ckpt::kCrcBlock, size_t(len))) << k;
  }

  // Elements [a, a+len) of `big` through the block reader.
  auto read_big = [&](int64_t a, int64_t len) {
    std::vector<float> got(size_t(len), -1.0f);
    ckpt::ShardRead r;
    r.shard = &is[0];
    r.dataset = "params/big";
    r.copies.push_back({uint64_t(a) * 4, uint64_t(len) * 4, reinterpret_cast<char*>(got.data())});
    ckpt::read_shards(path, ckpt::kCrcBlock, {r});
    return got;
  };
  const int64_t per = int64_t(ckpt::kCrcBlock / 4);
  for (auto [a, len] : std::vector<std::pair<int64_t, int64_t>>{
           {0, n}, {per - 3, 7}, {per, per}, {5, 2 * per}, {n - 10, 10}}) {
    const std::vector<float> got = read_big(a, len);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), big.begin() + a)) << a << "+" << len;
  }
  // Two shards in one call, the small one whole.
  std::vector<float> s2(small.size());
  ckpt::ShardRead rs{&is[1], "params/small", {{0, 1001 * 4, reinterpret_cast<char*>(s2.data())}}};
  ckpt::ShardRead rb{&is[0], "params/big", {}, true};
  EXPECT_EQ(ckpt::read_shards(path, ckpt::kCrcBlock, {rb, rs}), int64_t(n + 1001) * 4);
  EXPECT_EQ(s2, small);

  flip_byte(path, is[0].file_offset + ckpt::kCrcBlock + 12345);
  EXPECT_EQ(read_big(0, per)[7], big[7]);  // block 0 alone still reads
  const std::string why = error_of([&] { read_big(per - 1, 2); });
  EXPECT_NE(why.find("dataset 'params/big': block 1"), std::string::npos) << why;
  EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;
  EXPECT_EQ(ckpt::meta_crc32c(path, uint64_t(out.file_bytes), ext), out.meta_crc);  // data only
  flip_byte(path, 40);  // HDF5's superblock
  EXPECT_NE(ckpt::meta_crc32c(path, uint64_t(out.file_bytes), ext), out.meta_crc);
  fs::remove_all(dir);
}

// The resume's split check: verify_checkpoint(data=false) reads only the
// metadata, so a damaged data byte passes it and load() refuses the block
// naming file and dataset; a damaged metadata byte is refused before HDF5
// parses the file; data=true reads the whole file as before.
TEST(CheckpointBlocks, MetadataFirstThenEveryBlockTheLoaderReads) {
  const std::string dir = test::fresh_dir("split");
  ASSERT_EQ(test::run({CKPT_HELPER, "save", dir}), 0);
  const std::string step = dir + "/step_00000002", f = step + "/rank_00000.h5";
  const ckpt::Index idx = ckpt::read_index(step);
  ASSERT_EQ(idx.version, 3);
  const ckpt::IndexShard& s = idx.tensors.at(test::kNames[2]).shards.at(0);
  VerifyOptions meta_only;
  meta_only.data = false;
  EXPECT_EQ(verify_checkpoint(step, meta_only), "");

  flip_byte(f, s.file_offset + 9);
  EXPECT_EQ(verify_checkpoint(step, meta_only), "");
  EXPECT_NE(verify_checkpoint(step).find("file checksum mismatch"), std::string::npos);
  auto v = test::layout(1, 0, false);
  auto want = test::views(v);
  const std::string why = error_of([&] { load(step, want, 0); });
  EXPECT_NE(why.find(f), std::string::npos) << why;
  EXPECT_NE(why.find(std::string("dataset '") + test::kNames[2] + "': block 0"), std::string::npos)
      << why;
  // find_latest_good skips it (whole files) and step 1 loads.
  auto good = find_latest_good(dir);
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(fs::path(*good).filename(), "step_00000001");
  // Only steps before 2: what a resume asks for after step 2 failed to load.
  meta_only.before_step = 2;
  EXPECT_EQ(fs::path(*find_latest_good(dir, meta_only)).filename(), "step_00000001");

  flip_byte(f, s.file_offset + 9);  // repaired
  flip_byte(f, 40);
  const std::string m = verify_checkpoint(step, meta_only);
  EXPECT_NE(m.find(f), std::string::npos) << m;
  EXPECT_NE(m.find("metadata checksum mismatch"), std::string::npos) << m;
  const std::string l = error_of([&] { load(step, want, 0); });
  EXPECT_NE(l.find("metadata checksum mismatch"), std::string::npos) << l;
  fs::remove_all(dir);
}

// ctest/checkpoint/fixtures/v2: step 1 saved by ckpt_helper as built on main
// before format /3 (format /2, no per-block CRCs). It verifies, loads bitwise
// under other layouts, and a flipped byte in it is still refused by name.
TEST(CheckpointBlocks, ReadsAFormat2Checkpoint) {
  const std::string dir = test::fresh_dir("v2");
  fs::copy(CKPT_FIXTURES "/v2", dir, fs::copy_options::recursive);
  const std::string step = dir + "/step_00000001", f = step + "/rank_00000.h5";
  EXPECT_EQ(ckpt::read_index(step).version, 2);
  EXPECT_EQ(verify_checkpoint(step), "");
  VerifyOptions meta_only;
  meta_only.data = false;  // a /2 file has no metadata CRC: read whole regardless
  EXPECT_EQ(verify_checkpoint(step, meta_only), "");
  for (int world : {1, 2})
    for (int r = 0; r < world; ++r) {
      auto v = test::layout(world, r, false);
      auto want = test::views(v);
      const LoadResult res = load(step, want, 0);
      EXPECT_EQ(test::mismatches(v, 1), 0) << world << " " << r;
      EXPECT_EQ(res.rank_scalars["step"], 1);
      EXPECT_EQ(res.bytes_from_disk, 0);  // HDF5's hyperslabs, not the block reader
    }
  const ckpt::Index idx = ckpt::read_index(step);
  flip_byte(f, uint64_t(idx.files[0].file_bytes) - 1);
  EXPECT_NE(verify_checkpoint(step, meta_only).find("file checksum mismatch"), std::string::npos);
  fs::remove_all(dir);
}
