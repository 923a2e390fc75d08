// The telemetry schema is the one place its fields are described: the writer
// refuses any field that is not in it (so every field written is
// documented), and docs/telemetry.md must be exactly what the schema
// generates. Fix a stale page: cmake --build BUILD --target telemetry-doc
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/step_parts.hpp"
#include "scaletrain/build_config.hpp"
#include "telemetry/reader.hpp"
#include "telemetry/schema.hpp"
#include "telemetry/writer.hpp"

using namespace st::telemetry;
using nlohmann::json;

TEST(TelemetrySchema, DocsTelemetryMdIsUpToDate) {
  const std::string path = std::string(SCALETRAIN_SOURCE_DIR) + "/docs/telemetry.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << "; run: cmake --build BUILD --target telemetry-doc";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_TRUE(ss.str() == telemetry_reference_markdown())
      << "docs/telemetry.md is out of date with lib/telemetry/schema.cpp; run: cmake --build "
         "BUILD --target telemetry-doc";
}

TEST(TelemetrySchema, EveryFieldHasATypeAndAMeaning) {
  const std::string md = telemetry_reference_markdown();
  auto all = header_fields();
  all.insert(all.end(), step_fields().begin(), step_fields().end());
  for (const auto& e : event_specs()) {
    EXPECT_NE(md.find("| `" + e.name + "` |"), std::string::npos) << e.name;
    EXPECT_FALSE(e.when.empty()) << e.name;
    for (const auto& f : e.extra) {
      EXPECT_FALSE(f.meaning.empty()) << e.name << "." << f.name;
      EXPECT_NE(md.find("`" + f.name + "` (" + type_text(f.type) + "): " + f.meaning),
                std::string::npos)
          << e.name << "." << f.name;
    }
  }
  for (const auto& f : all) {
    EXPECT_FALSE(f.meaning.empty() && f.members.empty()) << f.name;
    EXPECT_NE(md.find("| `" + f.name + "` | " + type_text(f.type) + " |"), std::string::npos)
        << f.name;
  }
}

TEST(TelemetrySchema, CheckRecordNamesTheUndocumentedOrMistypedField) {
  EXPECT_EQ(check_record({{"type", "step"}, {"step", 1}, {"step_s", 0.5}, {"loss", nullptr}}), "");
  EXPECT_NE(check_record({{"type", "step"}, {"step", 1}, {"bogus_s", 1.0}}).find("'bogus_s'"),
            std::string::npos);
  EXPECT_NE(check_record({{"type", "step"}, {"step", "1"}}).find("'step' must be int"),
            std::string::npos);
  EXPECT_NE(check_record({{"type", "step"}, {"mem_bytes", {{"kv_cache", 1}}}})
                .find("mem_bytes: field 'kv_cache'"),
            std::string::npos);
  EXPECT_NE(check_record({{"type", "event"}, {"event", "ckpt_explode"}, {"t", 1.0}})
                .find("'ckpt_explode' is not in the telemetry schema"),
            std::string::npos);
  EXPECT_NE(
      check_record({{"type", "event"}, {"event", "end"}, {"t", 1.0}, {"steps", 3}}).find("'steps'"),
      std::string::npos);
  EXPECT_EQ(check_record({{"type", "event"}, {"event", "resume_open"}, {"t", 1.0}}), "");
}

TEST(TelemetrySchema, WriterRefusesAnUndocumentedField) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("st_schema_" + std::to_string(::getpid()) + ".jsonl"))
                            .string();
  std::filesystem::remove(p);
  st::TelemetryWriter w;
  w.open(p, {{"rank", 0}, {"world_size", 1}, {"host", "h"}});
  w.step({{"step", 1}, {"step_s", 0.1}, {"tokens", 8}});
  try {
    w.step({{"step", 2}, {"step_s", 0.1}, {"tokens", 8}, {"new_metric_s", 0.2}});
    FAIL() << "an undocumented field was written";
  } catch (const st::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'new_metric_s'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lib/telemetry/schema.cpp"), std::string::npos);
  }
  EXPECT_THROW(w.event("ckpt_commit", 1, {{"stall", 0.1}}), st::Error);
  w.close();
  std::ifstream in(p);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.find("new_metric_s"), std::string::npos) << "the refused record was written";
  std::filesystem::remove(p);
}

TEST(TelemetrySchema, TraceRecordSpansAreCheckedOneByOne) {
  const json ok = {{"type", "trace"},
                   {"step", 3},
                   {"spans",
                    {{{"n", "fwd"}, {"k", "compute"}, {"t0", 1.0}, {"t1", 1.5}, {"mb", 0}},
                     {{"n", "all_reduce"},
                      {"k", "comm:dp"},
                      {"t0", 1.2},
                      {"t1", 1.4},
                      {"bytes", 64},
                      {"seq", 7},
                      {"g", 0}}}}};
  EXPECT_EQ(check_record(ok), "");
  json bad = ok;
  bad["spans"][1]["stream"] = "x";
  EXPECT_NE(check_record(bad).find("spans[1]: field 'stream' is not in the telemetry schema"),
            std::string::npos)
      << check_record(bad);
  bad = ok;
  bad["spans"][0]["mb"] = "zero";
  EXPECT_NE(check_record(bad).find("spans[0]: field 'mb' must be int"), std::string::npos)
      << check_record(bad);
  bad = ok;
  bad["spans"][0] = 5;
  EXPECT_NE(check_record(bad).find("spans[0] must be an object"), std::string::npos);
}

// The reader's step fields take their types from the schema: every numeric
// step field it keeps is in step_fields() with that type, and nullable ones
// are exactly the schema's "float or null".
TEST(TelemetrySchema, ReaderStepFieldsFollowTheSchema) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("st-schema-" + std::to_string(::getpid()) + ".jsonl");
  std::string lines =
      R"({"type":"header","schema":"scaletrain.telemetry/1","rank":0,"world_size":1,"host":"h"})"
      "\n";
  // Every nullable float of the schema as null: accepted, read as NaN.
  json step = {{"type", "step"}, {"step", 1}, {"step_s", 0.5}, {"tokens", 8}};
  for (const auto& f : step_fields())
    if (f.type == Ftype::FloatOrNull) step[f.name] = nullptr;
  lines += step.dump() + "\n";
  lines += R"({"type":"trace","step":1,"spans":[]})"
           "\n";
  {
    std::ofstream o(dir);
    o << lines;
  }
  auto rt = read_rank_file(dir);
  ASSERT_TRUE(rt.ok()) << rt.errors[0];
  EXPECT_TRUE(std::isnan(rt.steps.at(0).loss));
  EXPECT_TRUE(rt.traces.empty()) << "traces are kept only when asked for";
  EXPECT_EQ(read_rank_file(dir, true).traces.size(), 1u);
  // A plain float of the schema as null is refused, naming it.
  {
    std::ofstream o(dir);
    o << lines.substr(0, lines.find('\n') + 1)
      << R"({"type":"step","step":1,"step_s":0.5,"tokens":8,"fwd_s":null})"
      << "\n";
  }
  rt = read_rank_file(dir);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.errors[0].find("field 'fwd_s': null where a number is required"), std::string::npos)
      << rt.errors[0];
  std::filesystem::remove(dir);
}

// The step's parts (core/step_parts.hpp) have one name each, the schema's
// step_parts_s lists them in their order, and the one rule splits a step
// into parts that add up to it: the tp and cp waits inside the compute move
// to comm (at most all of the compute), and `other` keeps the rest.
TEST(TelemetrySchema, StepPartsHaveOneNameEachAndAddUpToTheStep) {
  std::set<std::string> names;
  for (st::StepPart p : st::kAllStepParts) {
    ASSERT_NE(st::step_part_name(p), nullptr);
    EXPECT_FALSE(std::string(st::step_part_name(p)).empty());
    names.insert(st::step_part_name(p));
  }
  EXPECT_EQ(names.size(), st::kStepParts) << "two parts share a name";
  std::vector<std::string> listed;
  for (const auto& f : step_fields())
    if (f.name == "step_parts_s")
      for (const auto& m : f.members) listed.push_back(m.name);
  EXPECT_EQ(listed, std::vector<std::string>(st::kStepPartNames.begin(), st::kStepPartNames.end()));

  st::StepMeasured m;
  m.step = 1.0;
  m.data = 0.05;
  m.fwd = 0.3;
  m.bwd = 0.4;
  m.optim = 0.06;
  m.comm_exposed = 0.1;
  m.ckpt_stall = 0.02;
  m.inline_waits = 0.2;
  st::StepParts p = st::split_step(m);
  auto at = [&](st::StepPart k) { return p[st::ix(k)]; };
  EXPECT_DOUBLE_EQ(at(st::StepPart::Data), 0.05);
  EXPECT_DOUBLE_EQ(at(st::StepPart::Compute), 0.5);
  EXPECT_DOUBLE_EQ(at(st::StepPart::Optimizer), 0.06);
  EXPECT_DOUBLE_EQ(at(st::StepPart::Comm), 0.3);
  EXPECT_DOUBLE_EQ(at(st::StepPart::CkptStall), 0.02);
  EXPECT_NEAR(at(st::StepPart::Other), 0.07, 1e-12);
  double sum = 0;
  for (double v : st::shares_of(p, m.step)) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-9);
  // Waits longer than the compute they were measured inside: all of it is comm.
  m.inline_waits = 2.0;
  p = st::split_step(m);
  EXPECT_EQ(at(st::StepPart::Compute), 0.0);
  EXPECT_DOUBLE_EQ(at(st::StepPart::Comm), 0.8);
  // Twice-counted seconds (parts past the step) leave `other` below 0, which
  // the e2e tests of real runs refuse (test_comm_parts).
  m.inline_waits = 0.2;
  m.comm_exposed = 0.3;
  m.optim = 0.2;
  EXPECT_LT(st::split_step(m)[st::ix(st::StepPart::Other)], 0);
  // Shares of an empty step are 0, not NaN.
  for (double v : st::shares_of(p, 0)) EXPECT_EQ(v, 0);
}
