// The token file formats (docs/data.md) against files this test writes in
// each published layout from real text: what auto detects, that every layout
// yields the text's ids, that an llm.c shard and a raw file with the same
// tokens give the same global batch, that a folder (and a glob) of 3 shards
// gives the batches of their concatenation, that mixed shards are refused
// naming the odd one, and that each damaged header is refused naming the
// file and the byte offset; that a Megatron index is read lazily (a broken
// entry in its middle passes opening and is refused by the read that needs
// it, or at once with data.verify=full); and that data.verify=full lists
// every bad id of a 3-shard folder with its shard and byte offset.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "data/data.hpp"
#include "data/shard_set.hpp"
#include "layouts.hpp"

using namespace st;
using namespace st::test;
namespace fs = std::filesystem;

namespace {
const int kVocab = 256, kSeq = 64;

class Formats : public ::testing::Test {
 protected:
  void SetUp() override {
    text_ = english_text();
    if (text_.size() < 10000) GTEST_SKIP() << "no English text at /usr/share/common-licenses";
    ids_ = byte_ids(text_);
    dir_ = fresh_tmp(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Every id of the stream, read back through the loader's reader.
  std::vector<int32_t> all(const std::string& path, const std::string& format = "auto") {
    ShardSet s(path, format, "uint16", kVocab, "data.path");
    std::vector<int32_t> v(s.size());
    s.read(0, int(s.size()), v.data());
    return v;
  }
  std::vector<int32_t> expect() const { return {ids_.begin(), ids_.end()}; }
  // The message of the UsageError opening `path` throws ("" if none).
  std::string refusal(const std::string& path, const std::string& format = "auto") {
    try {
      ShardSet s(path, format, "uint16", kVocab, "data.path");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  std::string text_, dir_;
  std::vector<uint32_t> ids_;
};

TEST_F(Formats, EachLayoutIsDetectedAndYieldsTheText) {
  write_bytes(dir_ + "/raw.bin", raw_bytes(ids_, 2));
  write_bytes(dir_ + "/l16.bin", llmc_bytes(ids_, false));
  write_bytes(dir_ + "/l32.bin", llmc_bytes(ids_, true));
  write_megatron(dir_ + "/m16", ids_, 8);
  write_megatron(dir_ + "/m32", ids_, 4);
  struct Want {
    std::string path, format;
    TokType type;
  };
  for (const Want& w :
       {Want{"raw.bin", "raw", TokType::kU16}, Want{"l16.bin", "llmc", TokType::kU16},
        Want{"l32.bin", "llmc", TokType::kU32}, Want{"m16", "megatron", TokType::kU16},
        Want{"m16.bin", "megatron", TokType::kU16}, Want{"m16.idx", "megatron", TokType::kU16},
        Want{"m32.bin", "megatron", TokType::kI32}}) {
    SCOPED_TRACE(w.path);
    ShardSet s(dir_ + "/" + w.path, "auto", "uint16", kVocab, "data.path");
    EXPECT_EQ(s.format(), w.format);
    EXPECT_EQ(s.type(), w.type);
    EXPECT_EQ(all(dir_ + "/" + w.path), expect());
    EXPECT_EQ(all(dir_ + "/" + w.path, w.format), expect()) << "explicit data.format";
  }
  // A raw uint32 file needs data.dtype; llm.c's header carries its own.
  write_bytes(dir_ + "/raw32.bin", raw_bytes(ids_, 4));
  ShardSet r(dir_ + "/raw32.bin", "auto", "uint32", kVocab, "data.path");
  EXPECT_EQ(r.size(), ids_.size());
}

TEST_F(Formats, LlmcShardAndRawFileGiveTheSameGlobalBatch) {
  write_bytes(dir_ + "/raw.bin", raw_bytes(ids_, 2));
  write_bytes(dir_ + "/shard.bin", llmc_bytes(ids_, true));
  // dp = 2, grad_accum = 2, micro_batch = 3: rank 1's micro-batches of step 5.
  for (int rank = 0; rank < 2; ++rank)
    for (int m = 0; m < 2; ++m) {
      DataLoader a(make_file_source(dir_ + "/raw.bin", "uint16", 7, kVocab, kSeq), kSeq, 3, 2, 2,
                   rank);
      DataLoader b(make_file_source(dir_ + "/shard.bin", "uint16", 7, kVocab, kSeq), kSeq, 3, 2, 2,
                   rank);
      EXPECT_EQ(b.source().format(), "llmc");
      MicroBatch x, y;
      a.get(5, m, x);
      b.get(5, m, y);
      EXPECT_EQ(x.tokens, y.tokens);
      EXPECT_EQ(x.targets, y.targets);
    }
}

TEST_F(Formats, FolderOfThreeShardsIsTheirConcatenation) {
  // Cut at uneven points; names sort in stream order (b < c < d), and a file
  // that is not *.bin is no shard.
  const size_t c1 = ids_.size() / 3 + 17, c2 = 2 * ids_.size() / 3 - 5;
  auto part = [&](size_t a, size_t b) {
    return std::vector<uint32_t>(ids_.begin() + long(a), ids_.begin() + long(b));
  };
  fs::create_directories(dir_ + "/shards");
  write_bytes(dir_ + "/shards/d_003.bin", llmc_bytes(part(c2, ids_.size()), false));
  write_bytes(dir_ + "/shards/b_001.bin", llmc_bytes(part(0, c1), false));
  write_bytes(dir_ + "/shards/c_002.bin", llmc_bytes(part(c1, c2), false));
  write_bytes(dir_ + "/shards/notes.txt", "not a shard");
  write_bytes(dir_ + "/whole.bin", raw_bytes(ids_, 2));
  EXPECT_EQ(all(dir_ + "/shards"), expect());
  EXPECT_EQ(all(dir_ + "/shards/*_00?.bin"), expect());
  auto one = make_file_source(dir_ + "/whole.bin", "uint16", 3, kVocab, kSeq);
  auto three = make_file_source(dir_ + "/shards", "uint16", 3, kVocab, kSeq);
  auto glob = make_file_source(dir_ + "/shards/*.bin", "uint16", 3, kVocab, kSeq);
  EXPECT_NE(three->describe().find("3 shards"), std::string::npos) << three->describe();
  std::vector<int32_t> x(kSeq + 1), y(kSeq + 1), z(kSeq + 1);
  const std::vector<int32_t> ex = expect();
  int crossing = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    one->sample(i, kSeq, x.data());
    three->sample(i, kSeq, y.data());
    glob->sample(i, kSeq, z.data());
    ASSERT_EQ(x, y) << "sample " << i;
    ASSERT_EQ(x, z) << "sample " << i;
    // Does this window straddle a shard boundary? (found by its content)
    for (size_t cut : {c1, c2})
      for (size_t s = cut - kSeq; s < cut; ++s)
        if (std::equal(x.begin(), x.end(), ex.begin() + long(s))) ++crossing;
  }
  EXPECT_GT(crossing, 0) << "no sampled window crossed a shard boundary; the test proves little";
}

TEST_F(Formats, MixedShardsAreRefusedNamingTheOddOne) {
  fs::create_directories(dir_ + "/mix");
  write_bytes(dir_ + "/mix/a.bin", llmc_bytes(ids_, false));
  write_bytes(dir_ + "/mix/b.bin", llmc_bytes(ids_, true));
  std::string e = refusal(dir_ + "/mix");
  EXPECT_NE(e.find("b.bin' is llmc uint32"), std::string::npos) << e;
  EXPECT_NE(e.find("a.bin' is llmc uint16"), std::string::npos) << e;
  write_bytes(dir_ + "/mix/b.bin", raw_bytes(ids_, 2));
  e = refusal(dir_ + "/mix");
  EXPECT_NE(e.find("b.bin' is raw uint16"), std::string::npos) << e;
  // A format or raw width the schema does not list is named with the
  // schema's own choices (the one list, lib/config/schema.cpp).
  write_bytes(dir_ + "/one.bin", raw_bytes(ids_, 2));
  e = refusal(dir_ + "/one.bin", "parquet");
  EXPECT_NE(e.find("data.format: 'parquet' is not one of auto|raw|llmc|megatron"),
            std::string::npos)
      << e;
  try {
    ShardSet s(dir_ + "/one.bin", "raw", "uint8", kVocab, "data.path");
    ADD_FAILURE() << "raw uint8 accepted";
  } catch (const UsageError& x) {
    EXPECT_NE(std::string(x.what()).find("data.dtype: 'uint8' is not one of uint16|uint32"),
              std::string::npos)
        << x.what();
  }
  fs::create_directories(dir_ + "/none");
  EXPECT_NE(refusal(dir_ + "/none").find("no *.bin"), std::string::npos);
  EXPECT_NE(refusal(dir_ + "/none/*.bin").find("matches no token files"), std::string::npos);
}

TEST_F(Formats, DamagedHeadersAreRefusedNamingFileAndOffset) {
  std::vector<uint32_t> few(ids_.begin(), ids_.begin() + 1000);
  struct Bad {
    std::string name, bytes, format;
    std::vector<std::string> expect;
  };
  std::string count = llmc_bytes(few, false);
  count[8] = char(0xE9);  // header[2] = 1001: one token more than the file has
  count[9] = 3;
  const std::vector<Bad> bads = {
      {"trunc.bin",
       llmc_bytes(few, false).substr(0, 600),
       "llmc",
       {"trunc.bin", "byte offset 600", "truncated", "1024-byte header"}},
      {"magic.bin",
       llmc_bytes(few, false, 12345),
       "llmc",
       {"magic.bin", "byte offset 0", "bad magic 12345", "20240520"}},
      {"version.bin",
       llmc_bytes(few, true, 0, 1),
       "auto",
       {"version.bin", "byte offset 4", "version 1", "writes version 7"}},
      {"count.bin", count, "auto", {"count.bin", "byte offset 8", "1001", "truncated"}},
      {"cut.bin",
       llmc_bytes(few, false).substr(0, 1024 + 999 * 2),
       "auto",
       {"cut.bin", "should have 3024 bytes", "has 3022"}},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.name);
    write_bytes(dir_ + "/" + b.name, b.bytes);
    const std::string e = refusal(dir_ + "/" + b.name, b.format);
    for (const auto& s : b.expect) EXPECT_NE(e.find(s), std::string::npos) << e;
  }
  // Megatron: a dtype code out of range, a float code, a bad magic or
  // version, and an index whose counts do not fit its size.
  auto megatron = [&](const std::string& name, size_t at, char v, size_t cut = 0) {
    write_megatron(dir_ + "/" + name, few, 8);
    std::string idx;
    {
      std::ifstream f(dir_ + "/" + name + ".idx", std::ios::binary);
      idx.assign(std::istreambuf_iterator<char>(f), {});
    }
    if (cut)
      idx.resize(cut);
    else
      idx[at] = v;
    write_bytes(dir_ + "/" + name + ".idx", idx);
    return refusal(dir_ + "/" + name);
  };
  std::string e = megatron("code", 17, 9);
  for (auto s : {"code.idx", "byte offset 17", "dtype code 9", "out of range", "8 uint16"})
    EXPECT_NE(e.find(s), std::string::npos) << e;
  e = megatron("float", 17, 7);
  EXPECT_NE(e.find("float32"), std::string::npos) << e;
  e = megatron("mmagic", 0, 'X');
  EXPECT_NE(e.find("byte offset 0: bad magic"), std::string::npos) << e;
  e = megatron("mver", 9, 2);
  EXPECT_NE(e.find("byte offset 9: version 2"), std::string::npos) << e;
  e = megatron("mcut", 0, 0, 40);
  EXPECT_NE(e.find("mcut.idx"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  write_megatron(dir_ + "/mbin", few, 8);
  fs::resize_file(dir_ + "/mbin.bin", 1998);
  e = refusal(dir_ + "/mbin.bin");
  EXPECT_NE(e.find("mbin.bin' has 1998 bytes"), std::string::npos) << e;
  // data.format=megatron without an index; llmc on a raw file.
  write_bytes(dir_ + "/plain.bin", raw_bytes(few, 2));
  EXPECT_NE(refusal(dir_ + "/plain.bin", "megatron").find("no Megatron index"), std::string::npos);
  EXPECT_NE(refusal(dir_ + "/plain.bin", "llmc").find("bad magic"), std::string::npos);
}

TEST_F(Formats, OutOfRangeIdIsRefusedAtTheStepThatReadsIt) {
  // One id of 300 late in the file: start-up (opening) does not scan; the
  // first step whose global batch covers it is refused, naming file and
  // byte offset, and the steps before it are not.
  std::vector<uint32_t> v = ids_;
  const size_t bad = v.size() - 3000;
  v[bad] = 300;
  write_bytes(dir_ + "/big.bin", llmc_bytes(v, false));
  DataLoader dl(make_file_source(dir_ + "/big.bin", "uint16", 11, kVocab, kSeq), kSeq, 2, 1, 2, 0);
  long refused_at = 0;
  std::string msg;
  for (long step = 1; step <= 100000 && !refused_at; ++step) {
    try {
      dl.check_step(step);
    } catch (const UsageError& e) {
      refused_at = step;
      msg = e.what();
    }
  }
  ASSERT_GT(refused_at, 0);
  // The refused step really reads the bad id: one of its samples covers it.
  const std::string off = "byte offset " + std::to_string(1024 + 2 * bad);
  EXPECT_NE(msg.find("big.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find(off), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 300"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0..255"), std::string::npos) << msg;
  MicroBatch mb;
  EXPECT_NO_THROW(dl.get(refused_at - 1, 0, mb));
  EXPECT_THROW(
      {
        for (int r = 0; r < 2; ++r) {
          DataLoader d(make_file_source(dir_ + "/big.bin", "uint16", 11, kVocab, kSeq), kSeq, 2, 1,
                       2, r);
          d.get(refused_at, 0, mb);
        }
      },
      UsageError);
}

// Sequence k of a Megatron index with its byte pointer moved: opening (the
// O(1) checks of the ends) passes, reads away from it pass, the first read
// inside it is refused naming the index and the entry's byte offset, and
// data.verify=full refuses at opening with the same message.
TEST_F(Formats, MegatronIndexIsCheckedAsItIsRead) {
  const size_t seq = 50;
  write_megatron(dir_ + "/m", ids_, 8, seq);
  const uint64_t S = (ids_.size() + seq - 1) / seq, k = S / 2;
  std::string idx;
  {
    std::ifstream f(dir_ + "/m.idx", std::ios::binary);
    idx.assign(std::istreambuf_iterator<char>(f), {});
  }
  const uint64_t at = 34 + 4 * S + 8 * k;
  int64_t ptr;
  std::memcpy(&ptr, idx.data() + at, 8);
  ptr += 2;
  std::memcpy(idx.data() + at, &ptr, 8);
  write_bytes(dir_ + "/m.idx", idx);
  ShardSet s(dir_ + "/m", "auto", "uint16", kVocab, "data.path");  // opening passes
  ASSERT_EQ(s.size(), ids_.size());
  std::vector<int32_t> out(seq);
  EXPECT_NO_THROW(s.read(0, int(seq), out.data()));
  EXPECT_NO_THROW(s.read((k - 2) * seq, int(seq), out.data()));
  const std::string want = "m.idx' at byte offset " + std::to_string(at) + ": sequence " +
                           std::to_string(k) + " starts at byte";
  try {
    s.read(k * seq + 10, 5, out.data());
    ADD_FAILURE() << "a read inside the broken sequence passed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  try {
    make_file_source(dir_ + "/m", "uint16", 1, kVocab, kSeq, "auto", "data.path", true);
    ADD_FAILURE() << "data.verify=full passed a broken index";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  // The end of the last sequence against the .bin is checked at opening.
  write_megatron(dir_ + "/m2", ids_, 8, seq);
  fs::resize_file(dir_ + "/m2.bin", 2 * ids_.size() - 2);
  EXPECT_NE(
      refusal(dir_ + "/m2").find("last sequence ends at byte " + std::to_string(2 * ids_.size())),
      std::string::npos)
      << refusal(dir_ + "/m2");
}

// A folder of 3 llm.c shards with bad ids planted in the second and third:
// opening with data.verify=read passes (nothing is scanned), with
// data.verify=full it is refused listing every bad id with its shard, byte
// offset and value.
TEST_F(Formats, VerifyFullNamesEveryBadIdWithShardAndOffset) {
  fs::create_directories(dir_ + "/shards");
  const size_t third = ids_.size() / 3;
  std::vector<std::vector<uint32_t>> parts;
  for (int k = 0; k < 3; ++k)
    parts.emplace_back(ids_.begin() + k * third, ids_.begin() + (k + 1) * third);
  parts[1][777] = 300;
  parts[2][5] = 4000;
  parts[2][third - 1] = 256;
  for (int k = 0; k < 3; ++k)
    write_bytes(dir_ + "/shards/part_" + std::to_string(k) + ".bin", llmc_bytes(parts[k], false));
  EXPECT_NO_THROW(
      make_file_source(dir_ + "/shards", "uint16", 1, kVocab, kSeq, "auto", "data.path", false));
  std::string msg;
  try {
    make_file_source(dir_ + "/shards", "uint16", 1, kVocab, kSeq, "auto", "data.path", true);
  } catch (const UsageError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "data.verify=full passed 3 bad ids";
  EXPECT_NE(msg.find("found 3 token id(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0..255"), std::string::npos) << msg;
  for (const std::string& s :
       {"part_1.bin' byte offset " + std::to_string(1024 + 2 * 777) + ": id 300",
        "part_2.bin' byte offset " + std::to_string(1024 + 2 * 5) + ": id 4000",
        "part_2.bin' byte offset " + std::to_string(1024 + 2 * (third - 1)) + ": id 256"})
    EXPECT_NE(msg.find(s), std::string::npos) << s << " not in:\n" << msg;
  EXPECT_EQ(msg.find("part_0.bin"), std::string::npos) << msg;
}
}  // namespace
