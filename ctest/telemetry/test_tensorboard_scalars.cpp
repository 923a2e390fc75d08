// The TensorBoard mapping without protobuf (lib/tensorboard/scalars.hpp,
// framing.cpp): which tags a step record and an event give, the rates from
// run.json's facts, nulls as NaN, records without scalars; and the record
// framing's masked CRC32C against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/crc32c.hpp"
#include "metrics/metrics.hpp"
#include "tensorboard/event_file.hpp"
#include "tensorboard/scalars.hpp"

using nlohmann::json;
using namespace st::tensorboard;

namespace {

double value(const Scalars& s, const std::string& tag) {
  for (const auto& v : s.values)
    if (v.tag == tag) return v.value;
  ADD_FAILURE() << "no tag " << tag;
  return -1;
}

TEST(TensorBoardScalars, StepRecordTagsAndRates) {
  RunFacts f;
  f.world_size = 4;
  f.seq_len = 64;
  f.peak_flops = 1e9;
  f.model_flops_per_seq = 6e6;
  f.hw_flops_per_seq = 8e6;
  const json r = {{"type", "step"},
                  {"step", 7},
                  {"t_start", 100.0},
                  {"step_s", 0.5},
                  {"loss", nullptr},
                  {"lr", 1e-3},
                  {"global_tokens", 512},
                  {"mem_bytes", {{"params", 10}, {"grads", 20}}},
                  {"comm", {{"all_reduce", {{"s", 0.1}, {"bytes", 64}, {"calls", 2}}}}},
                  {"kernel_s", json::object()}};
  const auto s = scalars_of(r, f);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 7);
  EXPECT_EQ(s->wall_time, 100.5);
  EXPECT_TRUE(std::isnan(value(*s, "train/loss")));
  EXPECT_EQ(value(*s, "train/lr"), 1e-3);
  EXPECT_EQ(value(*s, "train/step_s"), 0.5);
  EXPECT_EQ(value(*s, "mem_bytes/grads"), 20);
  EXPECT_EQ(value(*s, "comm/all_reduce/bytes"), 64);
  EXPECT_EQ(value(*s, "throughput/tokens_per_s"), 1024);
  EXPECT_EQ(value(*s, "throughput/tokens_per_s_per_device"), 256);
  // 16 sequences/s x 6e6 FLOPs / (4 x 1e9) = 2.4%; HFU 3.2%.
  EXPECT_NEAR(value(*s, "utilization/mfu_percent"), 2.4, 1e-12);
  EXPECT_NEAR(value(*s, "utilization/hfu_percent"), 3.2, 1e-12);
  for (const auto& v : s->values) {
    EXPECT_NE(v.tag, "train/step");
    EXPECT_NE(v.tag, "train/t_start");
  }
  // No peak: no MFU/HFU, the rest stays.
  f.peak_flops = 0;
  const auto s2 = scalars_of(r, f);
  for (const auto& v : s2->values) EXPECT_EQ(v.tag.find("utilization/"), std::string::npos);
  // The rates at the slowest rank's pace, the progress line's (issue 56):
  // rank 0's own step_s is only the fallback of records without the field.
  json slow = r;
  slow["slowest_step_s"] = 1.0;
  const auto s3 = scalars_of(slow, f);
  EXPECT_EQ(value(*s3, "throughput/tokens_per_s"), 512);
  EXPECT_EQ(value(*s3, "train/step_s"), 0.5);
  EXPECT_EQ(value(*s3, "train/slowest_step_s"), 1.0);
}

TEST(TensorBoardScalars, EventsAndRecordsWithoutScalars) {
  const RunFacts f;
  const json ev = {{"type", "event"}, {"event", "eval"}, {"step", 3},
                   {"t", 42.0},       {"val_loss", 2.5}, {"val_tokens", 128}};
  const auto s = scalars_of(ev, f);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 3);
  EXPECT_EQ(s->wall_time, 42.0);
  ASSERT_EQ(s->values.size(), 2u);
  EXPECT_EQ(value(*s, "eval/val_loss"), 2.5);
  // Strings only, no step, a header, a trace: nothing.
  EXPECT_FALSE(scalars_of(
      {{"type", "event"}, {"event", "ckpt_begin"}, {"step", 3}, {"t", 1.0}, {"mode", "async"}}, f));
  EXPECT_FALSE(scalars_of({{"type", "event"}, {"event", "resume_open"}, {"t", 1.0}}, f));
  EXPECT_FALSE(scalars_of({{"type", "header"}, {"rank", 0}}, f));
  EXPECT_FALSE(scalars_of({{"type", "trace"}, {"step", 1}, {"spans", json::array()}}, f));
  EXPECT_FALSE(scalars_of(json(), f));
}

TEST(TensorBoardFraming, MaskedCrcAndLayout) {
  // crc32c("123456789") = 0xE3069283 (the check value); masked by hand:
  // rotr(0xE3069283, 15) = 0x2507C60D, + 0xa282ead8 = 0xC78AB0E5.
  EXPECT_EQ(st::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
  const std::string rec = frame_record("abc");
  ASSERT_EQ(rec.size(), 8u + 4 + 3 + 4);
  uint64_t len;
  std::memcpy(&len, rec.data(), 8);
  EXPECT_EQ(len, 3u);
  uint32_t c1, c2;
  std::memcpy(&c1, rec.data() + 8, 4);
  std::memcpy(&c2, rec.data() + 15, 4);
  EXPECT_EQ(c1, masked_crc32c(rec.data(), 8));
  EXPECT_EQ(rec.substr(12, 3), "abc");
  EXPECT_EQ(c2, masked_crc32c("abc", 3));
}

}  // namespace
