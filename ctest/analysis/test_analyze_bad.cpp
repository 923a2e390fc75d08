// Malformed input: each case exits 2 (or 0 where tolerated) with a message
// naming the file:line, field or value.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "analyze/cli.hpp"
#include "analyze/synth.hpp"
#include "tmpdir.hpp"

using namespace st::analysis;

namespace {
struct Result {
  int rc;
  std::string out, err;
};
Result cli(std::vector<std::string> args) {
  std::ostringstream o, e;
  int rc = cli_main(args, o, e);
  return {rc, o.str(), e.str()};
}
std::string small_run(const TmpDir& t, const std::string& name, int world = 4) {
  SynthSpec s;
  s.dir = t / name;
  s.world = world;
  s.steps = 20;
  write_synthetic_run(s);
  return s.dir;
}
std::string rank_file(const std::string& run, int r) {
  char b[64];
  std::snprintf(b, sizeof b, "/telemetry/rank_%05d.jsonl", r);
  return run + b;
}
// Replaces line `ln` (1-based) of a file.
void replace_line(const std::string& path, int ln, const std::string& text) {
  std::ifstream f(path);
  std::stringstream out;
  std::string line;
  for (int i = 1; std::getline(f, line); ++i) out << (i == ln ? text : line) << "\n";
  f.close();
  std::ofstream(path) << out.str();
}
}  // namespace

TEST(AnalyzeBad, EmptyFile) {
  TmpDir t;
  auto run = small_run(t, "r");
  std::ofstream(rank_file(run, 1), std::ios::trunc);
  auto r = cli({"run", run, "--no-plots"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("rank_00001.jsonl: empty file"), std::string::npos) << r.err;
}

TEST(AnalyzeBad, WrongSchemaVersion) {
  TmpDir t;
  auto run = small_run(t, "r");
  replace_line(
      rank_file(run, 2), 1,
      R"({"type":"header","schema":"scaletrain.telemetry/2","rank":2,"world_size":4,"host":"node0"})");
  auto r = cli({"run", run, "--no-plots"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("rank_00002.jsonl:1: field 'schema': \"scaletrain.telemetry/2\" is not "
                       "supported"),
            std::string::npos)
      << r.err;
}

TEST(AnalyzeBad, NonNumericField) {
  TmpDir t;
  auto run = small_run(t, "r");
  replace_line(rank_file(run, 0), 5, R"({"type":"step","step":4,"step_s":"fast","tokens":8192})");
  auto r = cli({"run", run, "--no-plots"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("rank_00000.jsonl:5: field 'step_s': expected a number, got \"fast\""),
            std::string::npos)
      << r.err;
  // The rank is flagged, not dropped: --allow-bad-ranks analyses the rest and lists it.
  auto a = cli({"run", run, "--no-plots", "--allow-bad-ranks"});
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.err.find("error (rank excluded)"), std::string::npos);
  std::ifstream rep(run + "/analysis/report.md");
  std::stringstream ss;
  ss << rep.rdbuf();
  EXPECT_NE(ss.str().find("rank_00000.jsonl:5"), std::string::npos);
}

TEST(AnalyzeBad, MalformedLineInTheMiddle) {
  TmpDir t;
  auto run = small_run(t, "r");
  replace_line(rank_file(run, 3), 7, R"({"type":"step","step":6,"step_s":1.0,)");
  auto r = cli({"run", run, "--no-plots"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("rank_00003.jsonl:7: malformed record"), std::string::npos) << r.err;
}

TEST(AnalyzeBad, MissingRankFile) {
  TmpDir t;
  auto run = small_run(t, "r");
  std::filesystem::remove(rank_file(run, 3));
  auto r = cli({"run", run, "--no-plots"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("rank_00003.jsonl: missing rank file (run.json world_size 4)"),
            std::string::npos)
      << r.err;
}

TEST(AnalyzeBad, CutLastLineToleratedAndReported) {
  TmpDir t;
  auto run = small_run(t, "r");
  std::ofstream(rank_file(run, 1), std::ios::app) << R"({"type":"step","step":21,"step_)";
  auto r = cli({"run", run, "--no-plots"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("rank_00001.jsonl:22: cut line tolerated"), std::string::npos) << r.err;
  std::ifstream rep(run + "/analysis/report.md");
  std::stringstream ss;
  ss << rep.rdbuf();
  EXPECT_NE(ss.str().find("cut line tolerated"), std::string::npos);
}

TEST(AnalyzeBad, MixedModelsRefused) {
  TmpDir t;
  auto a = small_run(t, "a", 4);
  SynthSpec s;
  s.dir = t / "b";
  s.world = 8;
  s.steps = 20;
  s.model_name = "synth-7b";
  s.n_params = 6'700'000'000;
  s.n_layers = 32;
  s.d_model = 4096;
  s.n_heads = 32;
  write_synthetic_run(s);
  auto r = cli({"campaign", a, s.dir, "--no-plots"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("refusing to mix models in one weak-scaling series"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("synth-7b"), std::string::npos);
  EXPECT_EQ(cli({"campaign", a, s.dir, "--no-plots", "--group-by-model"}).rc, 0);
}

TEST(AnalyzeBad, BadOptionsAndMissingRunJson) {
  TmpDir t;
  auto run = small_run(t, "r");
  auto w = cli({"run", run, "--window", "middle"});
  EXPECT_EQ(w.rc, 2);
  EXPECT_NE(w.err.find("--window: invalid value 'middle'"), std::string::npos);
  EXPECT_EQ(cli({"run", run, "--flops-formula", "magic"}).rc, 2);
  EXPECT_EQ(cli({"run", run, "--peak-flops", "lots"}).rc, 2);
  std::filesystem::remove(run + "/run.json");
  auto m = cli({"run", run});
  EXPECT_EQ(m.rc, 2);
  EXPECT_NE(m.err.find("run.json: missing"), std::string::npos) << m.err;
}

// `hang` checks each flight recorder dump's schema (runtime/flight_recorder.hpp)
// before reading it: an old, foreign or damaged dump is an error naming the
// file and the field.
TEST(AnalyzeBad, FlightDumpSchemaChecked) {
  TmpDir t;
  auto run = small_run(t, "r");
  std::filesystem::create_directories(run + "/flight");
  const std::string dump = run + "/flight/rank_00001.json";
  const std::string good_comm =
      R"("comms":[{"name":"dp","ranks":[0,1],"next_seq":1,"entries":[{"seq":0,"op":"all_reduce","bytes":8,"t_enqueue":1,"t_start":1,"t_end":0,"state":"started"}]}])";
  struct Case {
    std::string text, expect;
  } cases[] = {
      {R"({"rank":1,"t":1,)" + good_comm + "}", "no 'schema' field"},
      {R"({"schema":"scaletrain.flight/0","rank":1,"t":1,)" + good_comm + "}",
       "schema 'scaletrain.flight/0' is not the one"},
      {R"({"schema":"scaletrain.flight/1","rank":1,"t":1,"comms":{}})", "field 'comms'"},
      {R"({"schema":"scaletrain.flight/1","rank":1,"t":1,"comms":[{"name":"dp","ranks":[0,1],"next_seq":1,"entries":[{"seq":0,"op":"x","state":"lost"}]}]})",
       "field 'comms[0].entries[0].state': 'lost'"},
      {"[1,2]", "not a JSON object"},
  };
  for (const Case& c : cases) {
    std::ofstream(dump, std::ios::trunc) << c.text;
    auto r = cli({"hang", run});
    EXPECT_EQ(r.rc, 2) << c.text;
    EXPECT_NE(r.err.find("rank_00001.json: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
  // A good one is read (one rank entered a collective the other never did).
  std::ofstream(dump, std::ios::trunc)
      << R"({"schema":"scaletrain.flight/1","rank":1,"t":1,)" << good_comm << "}";
  auto r = cli({"hang", run});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Hang: all_reduce #0 on group 'dp'"), std::string::npos) << r.out;
}
