// Synthetic run folders with known answers: weak and strong scaling
// efficiency, checkpoint overhead both ways, the planted straggler, windows,
// MFU/HFU and the peak's provenance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "analyze/campaign.hpp"
#include "analyze/cli.hpp"
#include "analyze/plots.hpp"
#include "analyze/synth.hpp"
#include "metrics/metrics.hpp"
#include "tmpdir.hpp"

using namespace st::analysis;

namespace {
RunSummary analyse(const std::string& dir, Options opt = {}) {
  auto tel = st::telemetry::read_run(dir, 2);
  return summarize_run(tel, opt);
}
}  // namespace

TEST(AnalyzeSynth, WeakScalingEfficiency) {
  TmpDir t;
  std::vector<RunSummary> runs;
  const int gpus[] = {8, 16, 32};
  const double step[] = {1.0, 1.05, 1.1};
  for (int i = 0; i < 3; ++i) {
    SynthSpec s;
    s.dir = t / ("run" + std::to_string(gpus[i]));
    s.world = gpus[i];
    s.step_s = step[i];
    s.steps = 60;
    write_synthetic_run(s);
    runs.push_back(analyse(s.dir));
  }
  Campaign c = build_campaign(runs, false);
  ASSERT_EQ(c.series.size(), 1u);
  EXPECT_EQ(c.series[0].kind, "weak");
  EXPECT_EQ(c.series[0].base_gpus, 8);
  EXPECT_NEAR(c.series[0].efficiency[0].med, 1.0, 1e-9);
  EXPECT_NEAR(c.series[0].efficiency[1].med, 1.0 / 1.05, 1e-6);
  EXPECT_NEAR(c.series[0].efficiency[2].med, 1.0 / 1.1, 1e-6);
  // tokens/s per GPU = micro_batch * seq_len / step time
  EXPECT_NEAR(c.runs[0].tok_s_gpu, 4.0 * 2048 / 1.0, 1e-6);
}

TEST(AnalyzeSynth, StrongScalingEfficiency) {
  TmpDir t;
  std::vector<RunSummary> runs;
  for (int i = 0; i < 2; ++i) {
    SynthSpec s;
    s.dir = t / ("run" + std::to_string(i));
    s.world = 8 << i;
    s.global_batch_tokens = 8 * 4 * 2048;
    s.step_s = i == 0 ? 1.0 : 0.625;
    s.steps = 40;
    write_synthetic_run(s);
    runs.push_back(analyse(s.dir));
  }
  Campaign c = build_campaign(runs, false);
  EXPECT_EQ(c.series[0].kind, "strong");
  EXPECT_NEAR(c.series[0].efficiency[1].med, 1.0 / (0.625 * 2), 1e-6);  // speedup 1.6 on 2x GPUs
}

TEST(AnalyzeSynth, CheckpointOverheadBothWays) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "run";
  s.steps = 200;
  s.ckpt_interval = 50;     // checkpoints at 50, 100, 150, 200
  s.ckpt_stall = 0.5;       // on the checkpoint step
  s.ckpt_slow_extra = 0.8;  // 3 steps later (53, 103, 153; 203 does not exist)
  write_synthetic_run(s);
  RunSummary r = analyse(s.dir);
  const double total = synth_total_step_time(s);
  EXPECT_EQ(r.ckpt_steps, (std::vector<int64_t>{50, 100, 150, 200}));
  EXPECT_NEAR(r.step_p50, 1.0, 1e-9);
  EXPECT_NEAR(r.total_step_s, total, 1e-6);
  EXPECT_NEAR(r.ckpt_stall_sum, 4 * 0.5, 1e-9);
  EXPECT_NEAR(r.ckpt_overhead_instr, 4 * 0.5 / total, 1e-9);
  EXPECT_NEAR(r.ckpt_excess_sum, 3 * 0.8 + 0.5, 1e-6);
  EXPECT_NEAR(r.ckpt_overhead_excess, (3 * 0.8 + 0.5) / total, 1e-9);
}

TEST(AnalyzeSynth, PlantedStragglerFoundExactly) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "run";
  s.world = 16;
  s.ranks_per_host = 4;
  s.straggler_rank = 11;
  s.steps = 80;
  write_synthetic_run(s);
  RunSummary r = analyse(s.dir);
  ASSERT_FALSE(r.slowest_ranks.empty());
  EXPECT_EQ(r.slowest_ranks[0], 11);
  std::set<int> flagged;
  for (auto& o : r.out_of_line) flagged.insert(o.rank);
  EXPECT_EQ(flagged, std::set<int>{11});
  EXPECT_EQ(r.hosts[r.slowest_hosts[0]].host, "node2");
  for (auto& rs : r.ranks) {
    if (rs.rank == 11) {
      EXPECT_NEAR(rs.dist, 0.3 / 0.75, 0.01);
    }  // 0.3 extra on 0.75 busy
  }
}

TEST(AnalyzeSynth, WindowsMfuAndPeakProvenance) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "run";
  s.steps = 100;
  write_synthetic_run(s);
  RunSummary r = analyse(s.dir);
  EXPECT_EQ(r.win_first, 51);  // 99 steps after 1 warm-up: back half starts at index 1+49
  EXPECT_EQ(r.win_last, 100);
  st::metrics::ModelShape m{s.n_params, s.n_layers, s.d_model, s.n_heads, s.seq_len};
  const double seq_s = 8 * 4 / 1.0;
  EXPECT_NEAR(r.mfu, 100 * st::metrics::mpt_model_flops_per_seq(m) * seq_s / (8 * 989e12), 1e-9);
  EXPECT_NEAR(r.hfu, 100 * st::metrics::mpt_hw_flops_per_seq(m, "full") * seq_s / (8 * 989e12),
              1e-9);
  EXPECT_NE(r.peak_source.find("table: H100 SXM"), std::string::npos);

  Options o;
  o.window = parse_window("last:10", 1);
  EXPECT_EQ(analyse(s.dir, o).win_first, 91);
  o.window = parse_window("range:20:29", 1);
  auto rr = analyse(s.dir, o);
  EXPECT_EQ(rr.win_first, 20);
  EXPECT_EQ(rr.win_n, 10);
  o = {};
  o.formula = FlopsFormula::SixN12LHQT;
  EXPECT_NEAR(analyse(s.dir, o).mfu, r.mfu, 1e-9);  // same count when H*Q = d_model
  o.peak_override = 100e12;
  auto ro = analyse(s.dir, o);
  EXPECT_NEAR(ro.mfu, r.mfu * 989 / 100, 1e-6);
  EXPECT_NE(ro.peak_source.find("--peak-flops"), std::string::npos);

  SynthSpec cpu = s;  // CPU run: peak from run.json (measured sgemm rate)
  cpu.dir = t / "cpu";
  cpu.device_name = "Intel(R) Xeon(R) CPU";
  cpu.device_kind = "cpu";
  cpu.precision = "fp32";
  cpu.peak_flops = 2.5e12;
  write_synthetic_run(cpu);
  auto rc = analyse(cpu.dir);
  EXPECT_DOUBLE_EQ(rc.peak, 2.5e12);
  EXPECT_NE(rc.peak_source.find("run.json device.peak_flops (measured)"), std::string::npos);
}

TEST(AnalyzeSynth, CliWritesEveryOutput) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "runs/run8";
  s.steps = 30;
  s.ckpt_interval = 10;
  write_synthetic_run(s);
  std::ostringstream out, err;
  ASSERT_EQ(cli_main({"run", s.dir}, out, err), 0) << err.str();
  for (const char* f : {"report.md", "summary.json", "steps.csv", "ranks.csv", "step_timeline.gp"})
    EXPECT_TRUE(std::filesystem::exists(s.dir + "/analysis/" + f)) << f;
  EXPECT_NE(out.str().find("window: steps 16..30"), std::string::npos) << out.str();
  std::ostringstream o2, e2;
  ASSERT_EQ(cli_main({"campaign", s.dir, "--no-plots"}, o2, e2), 0) << e2.str();
  EXPECT_TRUE(std::filesystem::exists(t / "runs/analysis/campaign.csv"));
  // Without gnuplot the tables are still written and the skipped plots named.
  setenv("SCALETRAIN_GNUPLOT", "/nonexistent/gnuplot", 1);
  std::ostringstream o3, e3;
  EXPECT_EQ(cli_main({"run", s.dir, "--out", t / "nogp"}, o3, e3), 0);
  unsetenv("SCALETRAIN_GNUPLOT");
  EXPECT_TRUE(std::filesystem::exists(t / "nogp/report.md"));
  EXPECT_NE(e3.str().find("skipped plot step_timeline.svg"), std::string::npos) << e3.str();
}

// Many ranks: rank_skew is a rank x step heat map (one image), not a comb of
// one whisker per rank. A planted straggler is the row that runs hot.
TEST(AnalyzeSynth, RankSkewAtManyRanksIsAHeatMap) {
  TmpDir t;
  SynthSpec s;
  s.dir = t / "runs/run128";
  s.world = 128;
  s.ranks_per_host = 8;
  s.steps = 24;
  s.straggler_rank = 37;
  write_synthetic_run(s);
  const RunSummary r = analyse(s.dir);
  const std::vector<Plot> plots = run_plots(r);
  const auto it =
      std::find_if(plots.begin(), plots.end(), [](const Plot& p) { return p.name == "rank_skew"; });
  ASSERT_NE(it, plots.end());
  EXPECT_EQ(it->script.find("candlesticks"), std::string::npos) << it->script;
  EXPECT_EQ(it->script.find("whisker"), std::string::npos) << it->script;
  EXPECT_NE(it->script.find("w image"), std::string::npos) << it->script;
  // One scan line per rank, one value per window step.
  std::istringstream d(it->data);
  std::string line;
  size_t rows = 0, cells = 0;
  std::map<int, double> hottest;  // rank -> largest deviation
  while (std::getline(d, line)) {
    if (line.empty()) {
      ++rows;
      continue;
    }
    if (line[0] == '#') continue;
    std::istringstream ls(line);
    double step, row, rank, host, busy, rel;
    ls >> step >> row >> rank >> host >> busy >> rel;
    ++cells;
    hottest[int(rank)] = std::max(hottest[int(rank)], rel);
  }
  EXPECT_EQ(rows, 128u);
  EXPECT_EQ(cells, 128u * size_t(r.win_n));
  const auto worst = std::max_element(hottest.begin(), hottest.end(),
                                      [](auto& a, auto& b) { return a.second < b.second; });
  EXPECT_EQ(worst->first, 37);
  // Rendered: far fewer drawn paths than ranks (a whisker per rank would be
  // at least one each).
  const std::string gp = find_gnuplot();
  if (gp.empty()) GTEST_SKIP() << "gnuplot not on PATH: the SVG is not rendered";
  ASSERT_EQ(render_plot(t.p.string(), *it, gp), "");
  std::ifstream f(t / "rank_skew.svg");
  std::stringstream svg;
  svg << f.rdbuf();
  size_t paths = 0;
  for (size_t at = svg.str().find("<path"); at != std::string::npos;
       at = svg.str().find("<path", at + 1))
    ++paths;
  EXPECT_LT(paths, 128u) << "paths in rank_skew.svg";
  // The cells: one filled rectangle each (crisp, not a smoothed image).
  size_t cells_drawn = 0;
  for (size_t at = svg.str().find("<polygon"); at != std::string::npos;
       at = svg.str().find("<polygon", at + 1))
    ++cells_drawn;
  EXPECT_GE(cells_drawn, cells);
}
