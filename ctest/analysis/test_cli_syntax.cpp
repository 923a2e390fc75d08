// The command-line syntax scaletrain-analyze and scaletrain-plan share
// (lib/cli on Boost.Program_options): `--key=value` and `--key value` give
// the same result, `CMD --help` lists that command's options only, an unknown
// option or command is refused with exit 2 naming it and the nearest known
// one, abbreviations are refused, a repeated option's last value wins.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyze/cli.hpp"
#include "analyze/synth.hpp"
#include "cli/subcommands.hpp"
#include "core/error.hpp"
#include "planner/cli.hpp"
#include "scaletrain/build_config.hpp"
#include "tmpdir.hpp"

namespace fs = std::filesystem;

namespace {
struct Result {
  int rc;
  std::string out, err;
};
Result analyze(std::vector<std::string> args) {
  std::ostringstream o, e;
  const int rc = st::analysis::cli_main(args, o, e);
  return {rc, o.str(), e.str()};
}
Result plan(std::vector<std::string> args) {
  std::ostringstream o, e;
  const int rc = st::plan::cli_main(args, o, e);
  return {rc, o.str(), e.str()};
}
std::string synth_run(const TmpDir& t) {
  st::analysis::SynthSpec s;
  s.dir = t / "run";
  s.world = 2;
  s.steps = 12;
  st::analysis::write_synthetic_run(s);
  return s.dir;
}
std::string src(const std::string& rel) { return std::string(SCALETRAIN_SOURCE_DIR) + "/" + rel; }
nlohmann::json load(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}
}  // namespace

TEST(CliSyntax, SuggestsTheNearestOption) {
  const std::vector<std::string> known{"--no-plots", "--out", "--window", "--warmup"};
  EXPECT_EQ(st::cli::suggest_option("--no-plot", known), "--no-plots");
  EXPECT_EQ(st::cli::suggest_option("--wndow", known), "--window");
  EXPECT_EQ(st::cli::suggest_option("--win", known), "--window");  // a shortened name
  EXPECT_EQ(st::cli::suggest_option("--frobnicate", known), "");
}

// Both tools map errors through one helper: bad input exit 2, anything else
// exit 1, each prefixed with the program's name.
TEST(CliSyntax, OneErrorMappingForBothTools) {
  std::ostringstream e;
  EXPECT_EQ(st::cli::guarded("prog", e, [] { return 7; }), 7);
  EXPECT_EQ(e.str(), "");
  EXPECT_EQ(st::cli::guarded("prog", e, []() -> int { throw st::UsageError("bad key"); }), 2);
  EXPECT_EQ(e.str(), "prog: error: bad key\n");
  e.str("");
  EXPECT_EQ(st::cli::guarded("prog", e, []() -> int { throw std::runtime_error("boom"); }), 1);
  EXPECT_EQ(e.str(), "prog: internal error: boom\n");
  // The tools' own bad input, through it.
  const auto a = analyze({"run", "/nonexistent-run-dir"});
  EXPECT_EQ(a.rc, 2);
  EXPECT_EQ(a.err.rfind("scaletrain-analyze: error: ", 0), 0u) << a.err;
  const auto p = plan({"--devices", "8"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_EQ(p.err.rfind("scaletrain-plan: error: ", 0), 0u) << p.err;
}

TEST(CliSyntax, AnalyzeRunEqualsAndSpaceFormsAgree) {
  TmpDir t;
  const std::string run = synth_run(t);
  auto eq =
      analyze({"run", run, "--out=" + t / "eq", "--warmup=2", "--window=last:6", "--no-plots"});
  ASSERT_EQ(eq.rc, 0) << eq.err;
  auto sp =
      analyze({"run", run, "--out", t / "sp", "--warmup", "2", "--window", "last:6", "--no-plots"});
  ASSERT_EQ(sp.rc, 0) << sp.err;
  EXPECT_TRUE(fs::exists(t / "eq/report.md"));
  EXPECT_TRUE(fs::exists(t / "sp/report.md"));
  EXPECT_NE(eq.out.find("wrote " + t / "eq" + "/report.md"), std::string::npos) << eq.out;
  // The same options reached the analysis: the same window and figures.
  EXPECT_EQ(eq.out.substr(0, eq.out.find("wrote")), sp.out.substr(0, sp.out.find("wrote")));
  // Options before the positional argument, and a repeated one: the last wins.
  auto last = analyze({"run", "--out", t / "first", "--no-plots", run, "--out=" + t / "second"});
  ASSERT_EQ(last.rc, 0) << last.err;
  EXPECT_TRUE(fs::exists(t / "second/report.md"));
  EXPECT_FALSE(fs::exists(t / "first"));
}

TEST(CliSyntax, AnalyzeHelpPerSubCommand) {
  auto run = analyze({"run", "--help"});
  EXPECT_EQ(run.rc, 0);
  EXPECT_NE(run.out.find("usage: scaletrain-analyze run DIR"), std::string::npos) << run.out;
  for (const char* o : {"--out", "--warmup", "--window", "--peak-flops", "--no-plots"})
    EXPECT_NE(run.out.find(o), std::string::npos) << o << "\n" << run.out;
  EXPECT_EQ(run.out.find("--group-by-model"), std::string::npos) << run.out;
  auto trace = analyze({"trace", "-h"});
  EXPECT_EQ(trace.rc, 0);
  EXPECT_NE(trace.out.find("--steps"), std::string::npos) << trace.out;
  EXPECT_EQ(trace.out.find("--warmup"), std::string::npos) << trace.out;
  auto camp = analyze({"campaign", "--help"});
  EXPECT_NE(camp.out.find("--group-by-model"), std::string::npos) << camp.out;
  // The program's help lists every command; a bare call is an error with it.
  auto all = analyze({"--help"});
  EXPECT_EQ(all.rc, 0);
  for (const char* c : {"run DIR", "campaign DIR...", "mpt ", "trace DIR", "hang DIR"})
    EXPECT_NE(all.out.find(c), std::string::npos) << c << "\n" << all.out;
  auto bare = analyze({});
  EXPECT_EQ(bare.rc, 2);
  EXPECT_NE(bare.err.find("commands:"), std::string::npos);
}

TEST(CliSyntax, AnalyzeRefusesTyposWithASuggestion) {
  TmpDir t;
  const std::string run = synth_run(t);
  struct Bad {
    std::vector<std::string> args;
    std::vector<std::string> want;
  } bad[] = {
      {{"run", run, "--no-plot"},
       {"unknown option '--no-plot' for run", "did you mean '--no-plots'?", "run --help"}},
      {{"run", run, "--win=last:3"}, {"unknown option '--win'", "did you mean '--window'?"}},
      {{"run", run, "--steps", "3..5"}, {"unknown option '--steps'", "an option of trace"}},
      {{"campain", run}, {"unknown command 'campain'", "did you mean 'campaign'?"}},
      {{"run", run, "--out"}, {"--out"}},
      {{"run", run, "--no-plots=1"}, {"--no-plots"}},
      {{"run", run, "--warmup=x"}, {"--warmup: not a finite number: 'x'"}},
      {{"run"}, {"run: needs DIR"}},
      {{"run", run, run}, {"unexpected argument"}},
      {{"hang", run, "--out", "x"}, {"unknown option '--out' for hang"}},
  };
  for (const auto& b : bad) {
    auto r = analyze(b.args);
    std::string cmd;
    for (const auto& a : b.args) cmd += a + " ";
    EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.err;
    for (const auto& w : b.want)
      EXPECT_NE(r.err.find(w), std::string::npos) << cmd << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(run + "/analysis"));  // nothing ran
}

TEST(CliSyntax, PlanEqualsAndSpaceFormsAgree) {
  TmpDir t;
  const std::string cluster = src("configs/clusters/h200-141gb.yaml");
  const std::string cfg = src("configs/models/tiny.yaml");
  auto eq = plan({"--cluster=" + cluster, "--config=" + cfg, "--devices=2", "--zero=0,1",
                  "--set=model.n_layers=3", "--set=model.seq_len=32", "--top=2", "--no-plots",
                  "--out=" + t / "eq"});
  ASSERT_EQ(eq.rc, 0) << eq.err;
  auto sp = plan({"plan", "--cluster", cluster, "--config", cfg, "--devices", "2", "--zero", "0,1",
                  "--set", "model.n_layers=3", "--set", "model.seq_len=32", "--top", "2",
                  "--no-plots", "--out", t / "sp"});
  ASSERT_EQ(sp.rc, 0) << sp.err;
  const auto a = load(t / "eq/plan.json"), b = load(t / "sp/plan.json");
  EXPECT_EQ(a["counts"], b["counts"]);
  ASSERT_EQ(a["layouts"].size(), b["layouts"].size());
  for (size_t i = 0; i < a["layouts"].size(); ++i)
    EXPECT_EQ(a["layouts"][i]["name"], b["layouts"][i]["name"]);
  // Both --set values reached the config (composing, not last-wins).
  EXPECT_EQ(a["model"]["n_layers"], 3);
  EXPECT_EQ(a["model"]["seq_len"], 32);
  EXPECT_EQ(a["model"], b["model"]);
}

TEST(CliSyntax, PlanHelpAndTypos) {
  auto h = plan({"compare", "--help"});
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("usage: scaletrain-plan compare RUN_DIR..."), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("--cluster"), std::string::npos);
  EXPECT_EQ(h.out.find("--act-ckpt"), std::string::npos) << h.out;
  auto p = plan({"plan", "-h"});
  for (const char* o : {"--cluster", "--devices", "--act-ckpt", "--set", "--weak-scaling"})
    EXPECT_NE(p.out.find(o), std::string::npos) << o << "\n" << p.out;
  auto all = plan({"--help"});
  EXPECT_NE(all.out.find("calibrate-gpu"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("COMMAND defaults to plan"), std::string::npos) << all.out;

  const std::string cl = "--cluster=" + src("configs/clusters/h200-141gb.yaml");
  struct Bad {
    std::vector<std::string> args;
    std::string want;
  } bad[] = {
      {{cl, "--devices=8", "--no-plot"}, "did you mean '--no-plots'?"},
      {{"--clustr=x.yaml", "--devices=8"}, "did you mean '--cluster'?"},
      {{cl, "--device=8"}, "did you mean '--devices'?"},
      {{cl, "--devices=8", "--op-seconds=1"}, "an option of calibrate"},
      {{"calibrat", "--out=x"}, "did you mean 'calibrate'?"},
      {{cl, "--devices=8", "--top=0"}, "--top: expected one integer >= 1, got '0'"},
  };
  for (const auto& b : bad) {
    auto r = plan(b.args);
    EXPECT_EQ(r.rc, 2) << b.args[0] << "\n" << r.err;
    EXPECT_NE(r.err.find(b.want), std::string::npos) << b.args[0] << "\n" << r.err;
  }
}
