// Campaign analysis that knows repeats from scales (two repeats of one size
// are one point with a spread, never a scaling series), one peak per CPU
// campaign, and the checkpoint study's optimal interval against the
// Young/Daly formulas for three MTBFs, through the CLI's --mtbf, with C the
// median steady-state checkpoint cost whatever the interval.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyze/campaign.hpp"
#include "analyze/ckpt_study.hpp"
#include "analyze/cli.hpp"
#include "analyze/plots.hpp"
#include "analyze/synth.hpp"
#include "core/error.hpp"
#include "tmpdir.hpp"

using namespace st::analysis;

namespace {
RunSummary analyse(const std::string& dir) {
  auto tel = st::telemetry::read_run(dir, 2);
  return summarize_run(tel, Options{});
}
SynthSpec one_rank(const std::string& dir, double step_s) {
  SynthSpec s;
  s.dir = dir;
  s.world = 1;
  s.ranks_per_host = 1;
  s.steps = 40;
  s.step_s = step_s;
  s.jitter = 0;
  return s;
}
}  // namespace

// Two 1-rank repeats (the second 10% slower) used to come out as "strong
// scaling 1256.7%": now they are one point, median and [min, max].
TEST(AnalyzeCampaign, TwoRepeatsOfOneSizeAreAPointWithASpread) {
  TmpDir t;
  std::vector<RunSummary> runs;
  for (int i = 0; i < 2; ++i) {
    SynthSpec s = one_rank(t / ("runs/r" + std::to_string(i)), i == 0 ? 1.0 : 1.1);
    write_synthetic_run(s);
    runs.push_back(analyse(s.dir));
  }
  const Campaign c = build_campaign(runs, false);
  ASSERT_EQ(c.points.size(), 1u);
  EXPECT_EQ(c.points[0].runs.size(), 2u);
  ASSERT_EQ(c.series.size(), 1u);
  EXPECT_EQ(c.series[0].kind, "single");
  ASSERT_EQ(c.series[0].points.size(), 1u);
  const double tok_fast = 4.0 * 2048 / 1.0, tok_slow = 4.0 * 2048 / 1.1;
  EXPECT_NEAR(c.points[0].tok_s.lo, tok_slow, 1e-6);
  EXPECT_NEAR(c.points[0].tok_s.hi, tok_fast, 1e-6);
  EXPECT_NEAR(c.points[0].tok_s.med, 0.5 * (tok_fast + tok_slow), 1e-6);
  EXPECT_NEAR(c.series[0].efficiency[0].med, 1.0, 1e-12);
  // The CLI prints one point with its repeats, no scaling percentage.
  std::ostringstream o, e;
  ASSERT_EQ(cli_main({"campaign", t / "runs/r0", t / "runs/r1", "--no-plots"}, o, e), 0) << e.str();
  EXPECT_NE(o.str().find("(single, base 1 ranks): 1->1 ["), std::string::npos) << o.str();
  EXPECT_NE(o.str().find("2 repeats]"), std::string::npos) << o.str();
  EXPECT_EQ(o.str().find("strong"), std::string::npos) << o.str();
}

// Repeats 15% apart: when the slower one's work also cost 15% more CPU time
// a step, the host's speed moved; when its CPU cost stayed, something else
// did; 5% apart they agree; without cpu_s in the records it is not known.
// The campaign warns for each point that does not agree, and report.md's
// Repeats table names the verdicts.
TEST(AnalyzeCampaign, RepeatsApartSayWhetherTheHostsSpeedMoved) {
  struct Case {
    double step_b, cpu_a, cpu_b;
    const char* verdict;
    double cpu_change;
    bool recorded;
  };
  const Case cases[] = {{1.15, 0.40, 0.46, "host speed moved", 0.15, true},
                        {1.15, 0.40, 0.41, "not the host's CPU speed", 0.025, true},
                        {1.05, 0.40, 0.46, "agree", 0.15, true},
                        {1.15, 0, 0, "not the host's CPU speed", 0, false}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.verdict + std::string(" ") + std::to_string(k.cpu_b));
    TmpDir t;
    std::vector<std::string> dirs;
    std::vector<RunSummary> runs;
    for (int i = 0; i < 2; ++i) {
      SynthSpec s = one_rank(t / ("runs/r" + std::to_string(i)), i == 0 ? 1.0 : k.step_b);
      s.cpu_s = i == 0 ? k.cpu_a : k.cpu_b;
      write_synthetic_run(s);
      dirs.push_back(s.dir);
      runs.push_back(analyse(s.dir));
    }
    EXPECT_NEAR(runs[0].cpu_s_step, k.cpu_a, 1e-9);
    const Campaign c = build_campaign(runs, false);
    ASSERT_EQ(c.points.size(), 1u);
    const RepeatCheck& q = c.points[0].repeats;
    EXPECT_NEAR(q.step_spread, k.step_b - 1, 1e-6);
    EXPECT_EQ(q.cpu_recorded, k.recorded);
    EXPECT_NEAR(q.cpu_change, k.cpu_change, 1e-6);
    EXPECT_EQ(q.verdict, k.verdict);
    const bool warned = std::any_of(c.warnings.begin(), c.warnings.end(), [](const std::string& w) {
      return w.find("repeats' steps are") != std::string::npos;
    });
    EXPECT_EQ(warned, q.verdict != std::string("agree"));
    if (!k.recorded) {
      EXPECT_NE(c.warnings.back().find("recorded no cpu_s"), std::string::npos)
          << c.warnings.back();
    }
    std::ostringstream o, e;
    ASSERT_EQ(cli_main({"campaign", dirs[0], dirs[1], "--no-plots", "--out", t / "out"}, o, e), 0)
        << e.str();
    std::ifstream in(t / "out/report.md");
    const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_NE(md.find("## Repeats"), std::string::npos);
    EXPECT_NE(md.find(std::string("| ") + k.verdict + " |"), std::string::npos) << md;
  }
}

// Two sizes with two repeats each: a weak-scaling series of two points whose
// efficiency is the medians' ratio, with the repeats' range.
TEST(AnalyzeCampaign, RepeatsAtTwoSizesMakeASeriesOfTwoPoints) {
  TmpDir t;
  std::vector<RunSummary> runs;
  const double step[2][2] = {{1.0, 1.2}, {1.25, 1.25}};
  for (int g = 0; g < 2; ++g)
    for (int i = 0; i < 2; ++i) {
      SynthSpec s;
      s.dir = t / ("runs/n" + std::to_string(g) + "r" + std::to_string(i));
      s.world = 4 << g;
      s.steps = 40;
      s.step_s = step[g][i];
      write_synthetic_run(s);
      runs.push_back(analyse(s.dir));
    }
  const Campaign c = build_campaign(runs, false);
  ASSERT_EQ(c.points.size(), 2u);
  ASSERT_EQ(c.series.size(), 1u);
  EXPECT_EQ(c.series[0].kind, "weak");
  ASSERT_EQ(c.series[0].points.size(), 2u);
  const double base = 0.5 * (4 * 4 * 2048 / 1.0 + 4 * 4 * 2048 / 1.2);
  const double big = 8 * 4 * 2048 / 1.25;
  EXPECT_NEAR(c.series[0].efficiency[1].med, big / (2 * base), 1e-9);
  EXPECT_NEAR(c.series[0].efficiency[0].lo, (4 * 4 * 2048 / 1.2) / base, 1e-9);
  EXPECT_NEAR(c.series[0].efficiency[0].hi, (4 * 4 * 2048 / 1.0) / base, 1e-9);
}

// CPU ranks measure their own peak; a campaign uses one, the smallest size's.
TEST(AnalyzeCampaign, CpuCampaignUsesOnePeak) {
  TmpDir t;
  std::vector<RunSummary> runs;
  const double peaks[] = {30e9, 15e9};
  for (int g = 0; g < 2; ++g) {
    SynthSpec s;
    s.dir = t / ("runs/n" + std::to_string(g));
    s.world = 1 << g;
    s.ranks_per_host = 1;
    s.device_name = "cpu";
    s.device_kind = "cpu";
    s.precision = "fp32";
    s.peak_flops = peaks[g];
    s.steps = 30;
    write_synthetic_run(s);
    runs.push_back(analyse(s.dir));
  }
  const double mfu2_own = runs[1].mfu;
  const Campaign c = build_campaign(runs, false);
  EXPECT_DOUBLE_EQ(c.campaign_peak, 30e9);
  EXPECT_DOUBLE_EQ(c.runs[1].peak, 30e9);
  EXPECT_NEAR(c.runs[1].mfu, mfu2_own * 15e9 / 30e9, 1e-9);
  EXPECT_NE(c.campaign_peak_source.find("one peak for the campaign"), std::string::npos);
  // --peak-flops keeps every run at the given peak instead.
  EXPECT_EQ(build_campaign(runs, false, 1e9).campaign_peak, 0);
}

TEST(AnalyzeCampaign, YoungDalyFormulas) {
  const double C = 12.0;
  for (double M : {3600.0, 86400.0, 604800.0}) {
    EXPECT_NEAR(young_interval(C, M), std::sqrt(2 * C * M), 1e-9);
    const double d = std::sqrt(2 * C * M) * (1 + std::sqrt(C / (2 * M)) / 3 + C / (18 * M)) - C;
    EXPECT_NEAR(daly_interval(C, M), d, 1e-9);
  }
  EXPECT_DOUBLE_EQ(daly_interval(100, 40), 40);  // C >= 2M: checkpoint every MTBF
  EXPECT_EQ(parse_mtbf_list("90m,24h,7d,30"), (std::vector<double>{5400, 86400, 604800, 30}));
  for (const char* bad : {"", "x", "-1h", "0", "3w", "1h,"})
    EXPECT_THROW(parse_mtbf_list(bad), st::UsageError) << bad;
}

// The campaign's optimal interval for three MTBFs (--mtbf), printed and in
// campaign.json, equals the formula at the measured cost per checkpoint.
TEST(AnalyzeCampaign, OptimalIntervalForThreeMtbfsThroughTheCli) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "runs/ckpt";
  s.world = 2;
  s.steps = 60;
  s.ckpt_interval = 10;
  write_synthetic_run(s);
  std::ostringstream o, e;
  ASSERT_EQ(cli_main({"campaign", s.dir, "--no-plots", "--mtbf", "1h,24h,7d"}, o, e), 0) << e.str();
  std::ifstream f(t / "runs/analysis/campaign.json");
  const auto j = nlohmann::json::parse(f);
  const auto& opt = j.at("checkpoint_study").at("optimal");
  ASSERT_EQ(opt.size(), 3u) << opt.dump(1);
  const double mtbf[] = {3600, 86400, 604800};
  for (size_t i = 0; i < 3; ++i) {
    const double C = opt[i]["cost_s"].get<double>(), M = opt[i]["mtbf_s"].get<double>();
    EXPECT_DOUBLE_EQ(M, mtbf[i]);
    EXPECT_GE(C, s.ckpt_stall - 1e-9);  // at least the planted stall
    EXPECT_NEAR(opt[i]["young_s"].get<double>(), std::sqrt(2 * C * M), 1e-6);
    const double d = std::sqrt(2 * C * M) * (1 + std::sqrt(C / (2 * M)) / 3 + C / (18 * M)) - C;
    EXPECT_NEAR(opt[i]["daly_s"].get<double>(), d, 1e-6);
    EXPECT_NEAR(opt[i]["interval_steps"].get<double>(),
                std::max(d, opt[i]["persist_s"].get<double>()) /
                    j["points"][0]["step_s"]["median"].get<double>(),
                1e-6);
  }
  EXPECT_NE(o.str().find("optimal checkpoint interval (2 ranks, async): MTBF 3600 s"),
            std::string::npos)
      << o.str();
  std::ostringstream o2, e2;
  EXPECT_EQ(cli_main({"campaign", s.dir, "--no-plots", "--mtbf", "soon"}, o2, e2), 2);
  EXPECT_NE(e2.str().find("--mtbf: invalid value 'soon'"), std::string::npos) << e2.str();
}

// Young/Daly's C is the median cost of the steady-state checkpoints (every
// one after a run's first); the first is reported apart. Stalls planted in
// the telemetry: 0.9 s first, then 0.6, 0.10, 0.30, 0.20, 0.12, 0.25, 0.11.
TEST(AnalyzeCampaign, YoungDalyCostIsTheMedianSteadyStall) {
  TmpDir t;
  SynthSpec s = one_rank(t / "runs/i5", 1.0);
  s.steps = 40;
  s.ckpt_interval = 5;
  s.ckpt_stalls = {0.9, 0.6, 0.10, 0.30, 0.20, 0.12, 0.25, 0.11};
  write_synthetic_run(s);
  const RunSummary r = analyse(s.dir);
  ASSERT_EQ(r.ckpt_cost.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(r.ckpt_cost[i].stall_s, s.ckpt_stalls[i], 1e-9) << i;
    EXPECT_NEAR(r.ckpt_cost[i].interference_s, 0, 1e-9) << i;  // commit ends the save's step
  }
  const Campaign c = build_campaign({r}, false);
  const CkptStudy st = checkpoint_study(c, {3600, 86400}, "");
  ASSERT_EQ(st.points.size(), 1u);
  EXPECT_NEAR(st.points[0].cost_s, 0.20, 1e-9);  // median of the 7 after the first
  EXPECT_NEAR(st.points[0].first_cost_s, 0.9, 1e-9);
  EXPECT_EQ(st.points[0].steady_n, 7);
  EXPECT_TRUE(st.notes.empty());
  ASSERT_EQ(st.optimal.size(), 2u);
  for (const auto& o : st.optimal) {
    EXPECT_NEAR(o.cost_s, 0.20, 1e-9);
    EXPECT_NEAR(o.first_cost_s, 0.9, 1e-9);
    EXPECT_NEAR(o.young_s, std::sqrt(2 * 0.20 * o.mtbf_s), 1e-9);
    EXPECT_NEAR(o.daly_s, daly_interval(0.20, o.mtbf_s), 1e-12);
  }
}

// The same checkpoints at intervals 5 and 15 (first 0.9 s, second 0.6 s,
// then 0.1 s each) give the same C: the one-time cost of the first save no
// longer spreads over however many checkpoints a run took (a mean over
// them gave 0.054 s at interval 5 and 0.123 s at interval 15 in the
// committed study). A run with one checkpoint after its first is noted.
TEST(AnalyzeCampaign, CostPerCheckpointDoesNotChangeWithTheInterval) {
  TmpDir t;
  std::vector<RunSummary> runs;
  for (int interval : {5, 15})
    for (int rep : {1, 2}) {
      SynthSpec s =
          one_rank(t / ("runs/i" + std::to_string(interval) + "-" + std::to_string(rep)), 0.01);
      s.steps = 90;
      s.ckpt_interval = interval;
      s.ckpt_stall = 0.1;
      s.ckpt_stalls = {0.9, 0.6};
      write_synthetic_run(s);
      runs.push_back(analyse(s.dir));
    }
  const Campaign c = build_campaign(runs, false);
  const CkptStudy st = checkpoint_study(c, {86400}, "");
  ASSERT_EQ(st.points.size(), 2u);
  EXPECT_EQ(st.points[0].interval, 5);
  EXPECT_EQ(st.points[1].interval, 15);
  for (const auto& k : st.points) {
    EXPECT_NEAR(k.cost_s, 0.1, 1e-9) << k.interval;
    EXPECT_NEAR(k.first_cost_s, 0.9, 1e-9) << k.interval;
  }
  EXPECT_EQ(st.points[0].steady_n, 2 * 17);
  EXPECT_EQ(st.points[1].steady_n, 2 * 5);
  EXPECT_EQ(st.points[1].steady_min_run, 5);
  EXPECT_TRUE(st.notes.empty());
  ASSERT_EQ(st.optimal.size(), 1u);
  EXPECT_NEAR(st.optimal[0].cost_s, 0.1, 1e-9);
  EXPECT_NEAR(st.optimal[0].first_cost_s, 0.9, 1e-9);
  EXPECT_NEAR(st.optimal[0].young_s, std::sqrt(2 * 0.1 * 86400), 1e-9);

  // Interval 15 over 30 steps: one checkpoint after the first.
  SynthSpec s = one_rank(t / "short/i15", 0.01);
  s.steps = 30;
  s.ckpt_interval = 15;
  s.ckpt_stalls = {0.9, 0.6};
  write_synthetic_run(s);
  const CkptStudy few = checkpoint_study(build_campaign({analyse(s.dir)}, false), {86400}, "");
  ASSERT_EQ(few.points.size(), 1u);
  EXPECT_NEAR(few.points[0].cost_s, 0.6, 1e-9);
  ASSERT_EQ(few.notes.size(), 1u);
  EXPECT_NE(few.notes[0].find("interval 15: 1 checkpoint(s) after the first"), std::string::npos)
      << few.notes[0];
  EXPECT_NE(few.notes[0].find("train.steps >= 75"), std::string::npos) << few.notes[0];
}

// A checkpoint study (2 sizes x no checkpoint and two intervals x 2 repeats)
// holds one weak-scaling series: the checkpointed layouts are the study's
// points. The campaign header used to list "weak scaling" once per
// interval x mode (8 times in the checkpoint study of 2026-12-02, since replaced).
TEST(AnalyzeCampaign, CheckpointVariantsAreNotScalingSeriesOfTheirOwn) {
  TmpDir t;
  std::vector<std::string> args = {"campaign"};
  std::vector<RunSummary> runs;
  for (int world : {1, 2})
    for (int interval : {0, 5, 10})
      for (int rep : {1, 2}) {
        SynthSpec s;
        s.dir = t / ("c/runs/n" + std::to_string(world) + "-i" + std::to_string(interval) + "-" +
                     std::to_string(rep));
        s.world = world;
        s.ranks_per_host = 2;
        s.steps = 30;
        s.ckpt_interval = interval;
        write_synthetic_run(s);
        runs.push_back(analyse(s.dir));
        args.push_back(s.dir);
      }
  const Campaign c = build_campaign(runs, false);
  EXPECT_EQ(c.points.size(), 6u);
  ASSERT_EQ(c.series.size(), 3u);
  const auto shown = scaling_series(c);
  ASSERT_EQ(shown.size(), 1u);
  EXPECT_EQ(shown[0]->kind, "weak");
  EXPECT_EQ(shown[0]->layout.find("ckpt"), std::string::npos) << shown[0]->layout;
  for (const auto& s : c.series)
    EXPECT_EQ(s.ckpt_variant, s.layout.find("ckpt") != std::string::npos) << s.layout;
  // The study still has every checkpointed point.
  EXPECT_EQ(checkpoint_study(c, c.mtbf_s, "").points.size(), 4u);

  for (const char* a : {"--no-plots", "--out"}) args.push_back(a);
  args.push_back(t / "c/analysis");
  std::ostringstream o, e;
  ASSERT_EQ(cli_main(args, o, e), 0) << e.str();
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(o.str(), "weak scaling"), 1u) << o.str();
  std::ifstream rf(t / "c/analysis/report.md");
  std::stringstream report;
  report << rf.rdbuf();
  EXPECT_EQ(count(report.str(), "weak scaling, base"), 1u) << report.str();
  std::ifstream jf(t / "c/analysis/campaign.json");
  const auto j = nlohmann::json::parse(jf);
  int variants = 0;
  for (const auto& s : j.at("series")) variants += s.at("checkpoint_variant").get<bool>() ? 1 : 0;
  EXPECT_EQ(variants, 2);

  // The campaign folder's README (slurm/campaigns/report.py) names the one series.
  const char* src = std::getenv("SCALETRAIN_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "SCALETRAIN_SOURCE_DIR is set by ctest";
  const std::string cmd =
      std::string("python3 '") + src + "/slurm/campaigns/report.py' '" + (t / "c") + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream mf(t / "c/README.md");
  std::string line, row;
  while (std::getline(mf, line))
    if (line.rfind("| scaling series |", 0) == 0) row = line;
  EXPECT_EQ(count(row, "weak scaling"), 1u) << row;
  EXPECT_NE(row.find("over 1, 2 rank(s)"), std::string::npos) << row;
}

// An MFU sweep (two layouts at one size) draws each layout's memory headroom:
// the capacity run.json records less the peak, NaN where a run records none.
TEST(AnalyzeCampaign, MfuSweepShowsMemoryHeadroom) {
  TmpDir t;
  std::vector<RunSummary> runs;
  const int64_t cap = int64_t(80) << 30;
  for (int mb : {2, 4}) {
    SynthSpec s;
    s.dir = t / ("runs/mb" + std::to_string(mb));
    s.world = 8;
    s.micro_batch = mb;
    s.global_batch_tokens = int64_t(8) * 4 * s.seq_len;  // one batch: a sweep, not a series
    s.steps = 30;
    write_synthetic_run(s);
    if (mb == 4) {  // the other run predates the field
      std::ifstream in(s.dir + "/run.json");
      auto j = nlohmann::json::parse(in);
      j["device"]["memory_capacity_bytes"] = cap;
      j["device"]["memory_capacity_source"] = "total memory of cuda:0";
      std::ofstream(s.dir + "/run.json") << j.dump(1);
    }
    runs.push_back(analyse(s.dir));
  }
  EXPECT_EQ(runs[1].mem_capacity_bytes, cap);
  EXPECT_EQ(runs[0].mem_capacity_bytes, -1);
  const Campaign c = build_campaign(runs, false);
  std::vector<Plot> plots = campaign_plots(c);
  const auto it = std::find_if(plots.begin(), plots.end(),
                               [](const Plot& p) { return p.name == "mfu_by_layout"; });
  ASSERT_NE(it, plots.end());
  EXPECT_NE(it->script.find("headroom (capacity - peak)"), std::string::npos) << it->script;
  std::istringstream d(it->data);
  std::string line;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(d, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::vector<std::string> cells;
    for (std::string x; ls >> x;) cells.push_back(x);
    rows.push_back(cells);
  }
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 7u);
    if (r[0].find("mb4") != std::string::npos) {
      const double peak = std::stod(r[4]), capg = std::stod(r[5]), head = std::stod(r[6]);
      EXPECT_DOUBLE_EQ(capg, 80.0);
      EXPECT_NEAR(head, capg - peak, 1e-9);
      EXPECT_GT(peak, 0);
    } else {
      EXPECT_EQ(r[5], "NaN") << "no capacity recorded";
    }
  }
  const std::string gp = find_gnuplot();
  if (gp.empty()) GTEST_SKIP() << "gnuplot not on PATH";
  EXPECT_EQ(render_plot(t.p.string(), *it, gp), "");
}

// The breakdown's point labels name the size and only the settings that
// differ between points (whole layouts ran into each other, issue 56), and
// the prediction line names the cluster file that priced it.
TEST(AnalyzeCampaign, BreakdownLabelsAreShortAndThePredictionNamesItsClusterFile) {
  TmpDir t;
  std::vector<RunSummary> runs;
  for (int mb : {2, 4}) {
    for (int world : {4, 8}) {
      SynthSpec s;
      s.dir = t / ("runs/mb" + std::to_string(mb) + "-w" + std::to_string(world));
      s.world = world;
      s.ranks_per_host = world;  // one host
      s.micro_batch = mb;
      s.steps = 30;
      write_synthetic_run(s);
      std::ifstream in(s.dir + "/run.json");
      auto j = nlohmann::json::parse(in);
      j["prediction"] = {{"cluster", "results/study/cluster.yaml"},
                         {"step_s", 1.0},
                         {"parts_s", {{"gemm", 0.5}, {"comm_exposed", 0.1}}},
                         {"tokens_per_s", 1000.0 * world},
                         {"mfu", 0.3},
                         {"peak_flops", 1e15}};
      std::ofstream(s.dir + "/run.json") << j.dump(1);
      runs.push_back(analyse(s.dir));
    }
  }
  const Campaign c = build_campaign(runs, false);
  const std::vector<Plot> plots = campaign_plots(c);
  const auto bd = std::find_if(plots.begin(), plots.end(),
                               [](const Plot& p) { return p.name == "step_breakdown"; });
  ASSERT_NE(bd, plots.end());
  std::istringstream d(bd->data);
  std::vector<std::string> labels;
  for (std::string line; std::getline(d, line);)
    if (!line.empty() && line[0] == '"') labels.push_back(line.substr(1, line.find('"', 1) - 1));
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, (std::vector<std::string>{"4r mb2", "4r mb4", "8r mb2", "8r mb4"}));
  const auto tok = std::find_if(plots.begin(), plots.end(),
                                [](const Plot& p) { return p.name == "tok_s_gpu_vs_gpus"; });
  ASSERT_NE(tok, plots.end());
  EXPECT_NE(tok->script.find("planner prediction (results/study/cluster.yaml)"), std::string::npos)
      << tok->script;
}

// The study's bandwidth columns (issue 53): the node's write beside the
// storage probe's write (run.json `storage`), and the restore's bandwidth
// (the checkpoint's bytes over the slowest rank's whole restore, per node)
// beside the probe's cold read. Planted: node_write_Bps 5e8 against a probed
// 1e9, and a 1 GiB restore taking 2.0 / 2.5 s on the two ranks of one node
// against a probed 8e8 B/s.
TEST(AnalyzeCampaign, CheckpointStudyCarriesWriteAndRestoreBandwidth) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "runs/ckpt";
  s.world = 2;
  s.steps = 60;
  s.ckpt_interval = 10;
  write_synthetic_run(s);
  auto run = nlohmann::json::parse(std::ifstream(s.dir + "/run.json"));
  run["storage"] = {{"write_all_Bps", 1e9}, {"read_all_Bps", 8e8}};
  std::ofstream(s.dir + "/run.json") << run.dump(2) << "\n";
  for (int r = 0; r < 2; ++r) {
    const std::string p = s.dir + "/telemetry/rank_0000" + std::to_string(r) + ".jsonl";
    std::ifstream in(p);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    if (r == 0)
      for (size_t at = 0; (at = text.find("\"write_s\":4.0,", at)) != std::string::npos;)
        text.insert(at += 14, "\"node_write_Bps\":5e8,\"of_disk\":0.5,");
    text += std::string("{\"type\":\"event\",\"event\":\"ckpt_resume\",\"step\":0,\"t\":0,") +
            "\"path\":\"x\",\"from_step\":0,\"load_s\":1.0,\"restore_s\":" + (r ? "2.5" : "2.0") +
            ",\"bytes\":1073741824}\n";
    std::ofstream(p) << text;
  }
  const CkptStudy st = checkpoint_study(build_campaign({analyse(s.dir)}, false), {86400}, "");
  ASSERT_EQ(st.points.size(), 1u);
  EXPECT_DOUBLE_EQ(st.points[0].node_Bps, 5e8);
  EXPECT_DOUBLE_EQ(st.points[0].probed_write_Bps, 1e9);
  ASSERT_EQ(st.restore_rate.size(), 1u);
  EXPECT_EQ(st.restore_rate[0].nodes, 1);
  EXPECT_DOUBLE_EQ(st.restore_rate[0].restore_s, 2.5);
  EXPECT_DOUBLE_EQ(st.restore_rate[0].node_Bps, 1073741824 / 2.5);
  EXPECT_DOUBLE_EQ(st.restore_rate[0].probed_read_Bps, 8e8);
  std::ostringstream o, e;
  ASSERT_EQ(cli_main({"campaign", s.dir, "--no-plots"}, o, e), 0) << e.str();
  std::ifstream f(t / "runs/analysis/report.md");
  const std::string md((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(md.find("| 477 | 954 | 50% |"), std::string::npos) << md;  // MiB/s: 5e8, 1e9
  EXPECT_NE(md.find("| 2.500 | 410 | 763 | 0.54 |"), std::string::npos) << md;
}
