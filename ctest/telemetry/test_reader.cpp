// Telemetry reader: what the trainer's writer produces reads back exactly; the
// flat scanner rejects malformed JSON; a cut line before a resume and a
// resume's replayed steps are handled and reported.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "telemetry/flatjson.hpp"
#include "telemetry/reader.hpp"
#include "telemetry/writer.hpp"

namespace fs = std::filesystem;
using namespace st::telemetry;

namespace {
std::string tmp(const std::string& name) {
  auto d = fs::temp_directory_path() / ("st_reader_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}
}  // namespace

TEST(Reader, WriterRoundTrip) {
  const std::string p = tmp("rt.jsonl");
  fs::remove(p);
  {
    st::TelemetryWriter w;
    w.open(p, {{"rank", 0},
               {"world_size", 1},
               {"host", "h0"},
               // The trainer's mesh also describes itself; only sizes are read.
               {"mesh", {{"dp", 1}, {"tp", 2}, {"order", "pp,dp,cp,tp"}, {"sp", false}}},
               {"coords", {{"dp", 0}}},
               {"device", "cpu"},
               {"slurm_job_id", nullptr}});
    w.step({{"step", 1},
            {"t_start", 1.7e9},
            {"step_s", 0.25},
            {"data_s", 0.01},
            {"comm", {{"all_reduce", {{"s", 0.1}, {"bytes", 1024}, {"calls", 2}}}}},
            {"tokens", 4096},
            {"global_tokens", 4096},
            {"loss", NAN},
            {"mem_peak_bytes", 123}});
    w.event("ckpt_commit", 1, {{"stall_s", 0.05}, {"path", "x"}});
  }
  RankTelemetry rt = read_rank_file(p);
  ASSERT_TRUE(rt.ok()) << rt.errors[0];
  EXPECT_EQ(rt.header.schema, "scaletrain.telemetry/1");
  EXPECT_EQ(rt.header.host, "h0");
  EXPECT_EQ(rt.header.mesh.at("tp"), 2);
  ASSERT_EQ(rt.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(rt.steps[0].step_s, 0.25);
  EXPECT_EQ(rt.steps[0].tokens, 4096);
  EXPECT_EQ(rt.steps[0].mem_peak_bytes, 123);
  EXPECT_TRUE(std::isnan(rt.steps[0].loss));  // the writer turns NaN into null
  ASSERT_EQ(rt.events.size(), 1u);
  EXPECT_EQ(rt.events[0].event, "ckpt_commit");
  EXPECT_EQ(rt.events[0].step, 1);
}

TEST(Reader, FlatScannerIsStrict) {
  std::vector<flat::Member> ms;
  EXPECT_EQ(flat::parse_object(R"({"a":1,"b":{"c":[1,2,{"d":null}]},"e":"x\"y"})", ms), "");
  EXPECT_EQ(ms.size(), 3u);
  for (const char* bad : {R"({"a":1} x)", R"({"a":01})", R"({"a":1,})", R"({"a":tru})",
                          R"({"a":"x)", R"({"a" 1})", R"([1,2])", R"({"a":1.})", ""})
    EXPECT_NE(flat::parse_object(bad, ms), "") << bad;
  // Strings are UTF-8 (JSON requires it; the reports are JSON too).
  EXPECT_EQ(flat::parse_object("{\"t\":\"r\xc3\xa9sum\xc3\xa9\"}", ms), "");
  EXPECT_NE(flat::parse_object("{\"t\":\"a\xff\"}", ms).find("invalid UTF-8 in string at column 8"),
            std::string::npos);
  EXPECT_NE(flat::parse_object("{\"\xc3(\":1}", ms), "");
}

TEST(Reader, CutBeforeResumeAndReplay) {
  const std::string p = tmp("resume.jsonl");
  std::ofstream(p)
      << R"({"type":"header","schema":"scaletrain.telemetry/1","rank":0,"world_size":1,"host":"h"})"
      << "\n"
      << R"({"type":"step","step":1,"step_s":1.0,"tokens":1})"
      << "\n"
      << R"({"type":"step","step":2,"step_s":1.0,"tokens":1})"
      << "\n"
      << R"({"type":"step","step":3,"ste)"
      << "\n"
      << R"({"type":"event","event":"resume_open","t":1.0})"
      << "\n"
      << R"({"type":"step","step":2,"step_s":2.0,"tokens":1})"
      << "\n"
      << R"({"type":"step","step":3,"step_s":2.0,"tokens":1})"
      << "\n";
  RankTelemetry rt = read_rank_file(p);
  ASSERT_TRUE(rt.ok()) << rt.errors[0];
  ASSERT_EQ(rt.steps.size(), 3u);
  EXPECT_DOUBLE_EQ(rt.steps[1].step_s, 2.0);  // the replayed record wins
  ASSERT_EQ(rt.warnings.size(), 2u);
  EXPECT_NE(rt.warnings[0].find(":4: cut line tolerated (cut before a resume)"), std::string::npos);
  EXPECT_NE(rt.warnings[1].find("recorded twice"), std::string::npos);
}

TEST(Reader, UnknownRecordTypeAndSecondHeader) {
  const std::string p = tmp("types.jsonl");
  std::ofstream(p)
      << R"({"type":"header","schema":"scaletrain.telemetry/1.3","rank":0,"world_size":1,"host":"h"})"
      << "\n"
      << R"({"type":"stepp","step":1})"
      << "\n"
      << R"({"type":"header","schema":"scaletrain.telemetry/1"})"
      << "\n";
  RankTelemetry rt = read_rank_file(p);
  ASSERT_EQ(rt.errors.size(), 2u);
  EXPECT_NE(rt.errors[0].find(":2: field 'type': unknown record type \"stepp\""),
            std::string::npos);
  EXPECT_NE(rt.errors[1].find(":3: a second header record"), std::string::npos);
}
