// scaletrain-plan, the built binary: a CPU plan with the committed cluster
// file and its outputs (tables, plots, campaign YAML that mfu_sweep.sh's
// expander accepts), a GPU plan with layouts over the device memory,
// the weak-scaling projection, a quick calibrate through the MPI probe, the
// trainer's --dry-run agreeing with the planner's memory (one model), and
// bad input refused with exit status 2 and a message naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "e2e/run_util.hpp"
#include "plan/cluster.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using st::test::run_cmd;

namespace {
std::string plan_bin() {
  return st::test::env_or("SCALETRAIN_BUILD_DIR", ".") + std::string("/analysis/scaletrain-plan");
}
std::string src() { return st::test::src_dir(); }
st::test::RunResult plan(const std::string& args) { return run_cmd(plan_bin() + " " + args); }
json load(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in, nullptr, false);
}

// One CSV line's fields ("..." quotes a field; no quote inside one).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"')
      quoted = !quoted;
    else if (ch == ',' && !quoted)
      f.emplace_back();
    else
      f.back() += ch;
  }
  return f;
}

// plan.csv parsed against plan.json: a header, then one row per layout in
// rank order with the header's number of fields; a timed layout's step_s is
// the JSON's, an untimed one's timed fields are empty. Returns the number of
// untimed rows.
int check_plan_csv(const std::string& out) {
  const json j = load(fs::path(out) / "plan.json");
  std::ifstream in(fs::path(out) / "plan.csv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> head = csv_fields(line);
  const auto col = [&](const std::string& name) {
    return size_t(std::find(head.begin(), head.end(), name) - head.begin());
  };
  const size_t name_i = col("name"), step_i = col("step_s"), hfu_i = col("hfu");
  EXPECT_LT(hfu_i, head.size());
  size_t row = 0;
  int untimed = 0;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = csv_fields(line);
    EXPECT_EQ(f.size(), head.size()) << "row " << row + 1 << ": " << line;
    if (row >= j["layouts"].size() || f.size() != head.size()) return untimed;
    const json& l = j["layouts"][row++];
    EXPECT_EQ(f[name_i], l["name"].get<std::string>());
    if (l.contains("time")) {
      EXPECT_NEAR(std::stod(f[step_i]), l["time"]["step"].get<double>(),
                  1e-4 * l["time"]["step"].get<double>());
    } else {
      ++untimed;
      for (size_t i = col("peak_bytes"); i < head.size(); ++i) EXPECT_EQ(f[i], "") << head[i];
    }
  }
  EXPECT_EQ(row, j["layouts"].size());
  return untimed;
}

// The campaign's job lines as mfu_sweep.sh's expander gives them (the
// sweep's name line dropped); a failing expansion fails the test.
std::vector<std::string> expand_jobs(const std::string& campaign) {
  auto e = run_cmd("python3 " + src() + "/slurm/campaigns/expand_sweep.py " + campaign);
  EXPECT_EQ(e.exit_code, 0) << e.output;
  std::istringstream in(e.output);
  std::vector<std::string> lines;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = st::test::fresh_dir("plan-cli"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(PlanCli, CpuPlanWritesTablesPlotsAndACampaign) {
  const std::string out = dir_ + "/cpu";
  auto r = plan("--cluster " + src() + "/configs/clusters/cpu-local.yaml --config " + src() +
                "/configs/models/default.yaml --set model.seq_len=128 --devices 1,2,4"
                " --global-batch 4 --micro-batch 1,2 --zero 0,1 --top 3 --near 1 --out " +
                out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"plan.md", "plan.csv", "plan.json", "campaign.yaml"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const json j = load(fs::path(out) / "plan.json");
  ASSERT_FALSE(j.is_discarded());
  const auto& L = j["layouts"];
  ASSERT_EQ(L.size(), j["counts"]["layouts"].get<size_t>());
  EXPECT_GT(j["counts"]["feasible"].get<int>(), 5);
  // Ranked: feasible ones first, by predicted tokens/s.
  double prev = 1e300;
  bool in_feasible = true;
  for (const auto& l : L) {
    if (!l["feasible"].get<bool>()) {
      in_feasible = false;
      continue;
    }
    ASSERT_TRUE(in_feasible) << "a feasible layout after an infeasible one";
    const double t = l["time"]["tokens_per_s"].get<double>();
    EXPECT_LE(t, prev);
    prev = t;
    // Parts add up: memory total is the sum of its parts.
    const auto& m = l["memory"];
    EXPECT_NEAR(m["total"].get<double>(),
                m["weights"].get<double>() + m["grads"].get<double>() + m["optim"].get<double>() +
                    m["activations"].get<double>() + m["buffers"].get<double>() +
                    m["workspace"].get<double>(),
                1.0);
  }
  // CSV: a header and one row per layout, parsed.
  check_plan_csv(out);
  // The campaign expands with mfu_sweep.sh's own expander.
  const auto lines = expand_jobs(out + "/campaign.yaml");
  const int jobs = int(lines.size());
  for (const auto& line : lines) {
    EXPECT_NE(line.find("--set parallel.dp="), std::string::npos) << line;
    EXPECT_NE(line.find("configs/models/default.yaml"), std::string::npos) << line;
  }
  // --top 3 within each device count; nothing is over the memory limit of this machine.
  std::map<int, int> feasible;
  for (const auto& l : L) feasible[l["devices"].get<int>()] += l["feasible"].get<bool>();
  int want = 0;
  for (int n : {1, 2, 4}) want += std::min(3, feasible[n]);
  EXPECT_EQ(jobs, want);
  EXPECT_GT(want, 3);
  if (!st::test::env_or("SCALETRAIN_GNUPLOT", "").empty() ||
      run_cmd("command -v gnuplot").exit_code == 0) {
    EXPECT_TRUE(fs::exists(fs::path(out) / "throughput_vs_memory.svg"));
    EXPECT_TRUE(fs::exists(fs::path(out) / "feasibility_frontier.svg"));
  }
  EXPECT_TRUE(fs::exists(fs::path(out) / "feasibility_frontier.gp"));
}

TEST_F(PlanCli, GpuPlanMarksLayoutsOverMemory) {
  const std::string out = dir_ + "/gpu";
  auto r = plan("--cluster " + src() +
                "/configs/clusters/a100-sxm-40gb.yaml --set model.preset=llama-7b"
                " --set model.seq_len=2048 --devices 8 --micro-batch 1,4 --grad-accum 4"
                " --zero 0,1,3 --act-ckpt none,full --top 5 --out " +
                out + " --no-plots");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = load(fs::path(out) / "plan.json");
  int over = 0, not_runnable = 0, feasible = 0;
  for (const auto& l : j["layouts"]) {
    const std::string reason = l["reason"];
    over += reason.rfind("memory:", 0) == 0;
    not_runnable += !l["runs_on_this_trainer"].get<bool>();
    feasible += l["feasible"].get<bool>();
  }
  EXPECT_GT(over, 0) << "a 7B model with replicated optimizer state cannot fit 40 GB";
  // Invalid layouts (ZeRO 3 with pp > 1) are untimed: their CSV rows still
  // have every column.
  EXPECT_GT(check_plan_csv(out), 0);
  // The engine runs every layout family on every device (lib/engine).
  EXPECT_EQ(not_runnable, 0);
  EXPECT_GT(feasible, 0);
  // ZeRO 0 on 8 GPUs: 18 bytes per parameter of 6.7e9 is over 40 GB.
  for (const auto& l : j["layouts"]) {
    if (l["zero_stage"] == 0 && l["tp"] == 1 && l["pp"] == 1) {
      EXPECT_FALSE(l["feasible"].get<bool>()) << l.dump();
    }
  }
}

TEST_F(PlanCli, WeakScalingProjection) {
  auto r =
      plan("--cluster " + src() +
           "/configs/clusters/h100-sxm-80gb.yaml --set model.preset=llama-7b"
           " --set model.seq_len=4096 --micro-batch 1 --grad-accum 8 --act-ckpt full --zero 1,3"
           " --weak-scaling 8,16,64,256 --out " +
           dir_ + "/weak --no-plots");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = load(fs::path(dir_) / "weak/weak_scaling.json");
  ASSERT_EQ(j.size(), 4u);
  EXPECT_DOUBLE_EQ(j[0]["efficiency"].get<double>(), 1.0);
  for (const auto& p : j) {
    ASSERT_TRUE(p.contains("efficiency")) << p.dump();
    const double e = p["efficiency"].get<double>();
    // The fastest layout may change with the size, so slightly above 1 is possible.
    EXPECT_TRUE(e > 0.3 && e <= 1.05) << p.dump();
    // Fixed per-device batch: global batch = 8 sequences x devices.
    EXPECT_EQ(p["micro_batch"].get<int>() * p["grad_accum"].get<int>() * p["dp"].get<int>(),
              8 * p["devices"].get<int>());
  }
}

// The 405B shape (Llama 3 405B: 126 layers, d_model 16384, 128 heads, 8 kv
// heads, ffn 53248, vocab 128256) at seq 8192.
const std::string k405b =
    " --set model.n_layers=126 --set model.d_model=16384 --set model.n_heads=128"
    " --set model.n_kv_heads=8 --set model.ffn_hidden=53248 --set model.vocab_size=128256"
    " --set model.seq_len=8192";

// Every knob and --set applies first, then the rules run once: the config's
// own grad_accum (1) is not what the interleaved pipeline is planned with.
TEST_F(PlanCli, KnobsApplyBeforeValidation) {
  const std::string args = "--cluster " + src() + "/configs/clusters/h100-sxm-80gb.yaml" + k405b +
                           " --set parallel.num_model_chunks=2"
                           " --set parallel.pipeline_layers=3,4*30,3 --devices 16384 --dp 128"
                           " --tp 8 --pp 16 --cp 1 --sp 1 --zero 1 --micro-batch 1"
                           " --act-ckpt full --no-plots --out ";
  auto r = plan(args + dir_ + "/knobs --grad-accum 32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = load(fs::path(dir_) / "knobs/plan.json");
  ASSERT_EQ(j["layouts"].size(), 1u);
  const json& l = j["layouts"][0];
  EXPECT_TRUE(l["feasible"].get<bool>()) << l.dump();
  EXPECT_EQ(l["grad_accum"], 32);
  EXPECT_EQ(l["num_model_chunks"], 2);
  EXPECT_EQ(l["pipeline_split"], "config");
  EXPECT_EQ(l["chunk_layers"], "3,4*30,3");
  // A knob value the rules refuse is still bad input naming the key.
  r = plan(args + dir_ + "/bad --grad-accum 24");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.grad_accum"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scaletrain-plan: error:"), std::string::npos) << r.output;
}

// --top ranks within each device count: 8 devices' layouts are listed beside
// the faster 64-device ones.
TEST_F(PlanCli, TopRanksWithinEachDeviceCount) {
  const std::string out = dir_ + "/top";
  auto r = plan("--cluster " + src() +
                "/configs/clusters/h100-sxm-80gb.yaml --set model.preset=llama-7b"
                " --set model.seq_len=2048 --devices 8,64 --tp 1,2,8 --pp 1 --cp 1 --zero 1,3"
                " --micro-batch 1 --grad-accum 4 --act-ckpt full --top 2 --near 0 --no-plots"
                " --out " +
                out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(fs::path(out) / "plan.md");
  std::map<int, int> rows;  // devices -> rows in the top table
  const std::regex row(R"(^\| (\d+) \| dp\S+ \| (\d+) \|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) ++rows[std::stoi(m[2])];
  }
  EXPECT_EQ(rows[8], 2) << r.output;
  EXPECT_EQ(rows[64], 2) << r.output;
}

// --placement cyclic reaches the pricing (pp 2 x dp 2 on 2-rank nodes: the
// pipeline crosses the nodes instead of dp), plan.md, and the campaign, whose
// expander hands mfu_sweep.sh the placement of every job (scaletrain.sbatch
// launches it so); block writes no key and expands as block.
TEST_F(PlanCli, PlacementReachesThePricingAndTheCampaign) {
  std::map<std::string, double> step;  // placement -> the pp 2 x dp 2 layout's step
  for (const std::string pl : {"block", "cyclic"}) {
    const std::string out = dir_ + "/" + pl;
    auto r = plan("--cluster " + src() + "/configs/clusters/emucluster-cpu.yaml --config " +
                  src() +
                  "/configs/models/default.yaml --set model.seq_len=128 --devices 4 --pp 2 --tp 1"
                  " --cp 1 --zero 0 --micro-batch 1 --grad-accum 4 --act-ckpt none --top 1"
                  " --near 0 --no-plots --placement " +
                  pl + " --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json j = load(fs::path(out) / "plan.json");
    for (const auto& l : j["layouts"])
      if (l["name"].get<std::string>().rfind("dp2-tp1-pp2-cp1-z0-mb1-ga4", 0) == 0 &&
          l.contains("time"))
        step[pl] = l["time"]["step"].get<double>();
    std::ifstream md(fs::path(out) / "plan.md");
    const std::string text{std::istreambuf_iterator<char>(md), {}};
    EXPECT_EQ(text.find("(ranks cyclic over the nodes)") != std::string::npos, pl == "cyclic");
    std::ifstream cy(fs::path(out) / "campaign.yaml");
    const std::string camp{std::istreambuf_iterator<char>(cy), {}};
    EXPECT_EQ(camp.find("\nplacement: cyclic\n") != std::string::npos, pl == "cyclic") << camp;
    const auto lines = expand_jobs(out + "/campaign.yaml");
    for (const auto& line : lines) {
      std::vector<std::string> f;
      std::istringstream ls(line);
      for (std::string c; std::getline(ls, c, '\t');) f.push_back(c);
      ASSERT_EQ(f.size(), 5u) << line;
      EXPECT_EQ(f[3], pl) << line;
    }
    EXPECT_GE(lines.size(), 1u);
  }
  ASSERT_EQ(step.size(), 2u) << "the pp 2 x dp 2 layout timed under both placements";
  EXPECT_NE(step["block"], step["cyclic"]);
  // A campaign's placement other than block or cyclic is named.
  const std::string bad = dir_ + "/bad.yaml";
  std::ofstream(bad) << "name: x\nmodels: [tiny]\nseq_lens: [64]\nplacement: round\n"
                        "layouts:\n  - {name: a, nodes: 1, ranks_per_node: 1}\n";
  auto b = run_cmd("python3 " + src() + "/slurm/campaigns/expand_sweep.py " + bad);
  EXPECT_NE(b.exit_code, 0);
  EXPECT_NE(b.output.find("'placement': expected block or cyclic, got 'round'"), std::string::npos)
      << b.output;
}

// The weak-scaling projection at a 405B shape: a fractional batch per
// device (1/8 sequence: 1024 tokens, as a 16M-token batch on 16k devices),
// the uneven split chosen (126 layers do not split evenly over 16 stages),
// and each scale's step parts in the table, the CSV and a plot of them.
TEST_F(PlanCli, WeakScalingBreakdownPerScale) {
  const std::string out = dir_ + "/weak405";
  auto r = plan("--cluster " + src() + "/configs/clusters/h100-sxm-80gb.yaml" + k405b +
                " --tp 8 --pp 16 --cp 1 --sp 1 --zero 1 --micro-batch 1 --act-ckpt full"
                " --weak-batch 0.125 --weak-scaling 64,128,2048 --out " +
                out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(fs::path(out) / "weak_scaling.csv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> head = csv_fields(line);
  for (const char* c : {"compute_s", "bubble_s", "tp_s", "pp_s", "dp_s", "zero_s", "mfu",
                        "peak_bytes", "efficiency", "tokens_per_s_device", "chunk_layers"})
    EXPECT_NE(std::find(head.begin(), head.end(), c), head.end()) << c;
  const auto col = [&](const std::vector<std::string>& f, const std::string& name) {
    return f[size_t(std::find(head.begin(), head.end(), name) - head.begin())];
  };
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) rows.push_back(csv_fields(line));
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& f : rows) ASSERT_EQ(f.size(), head.size()) << line;
  EXPECT_EQ(col(rows[0], "layout"), "");  // 64 devices: fewer than tp x pp
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(col(rows[i], "pipeline_split"), "ends");
    EXPECT_EQ(col(rows[i], "chunk_layers"), "7,8*14,7");
    EXPECT_EQ(std::stol(col(rows[i], "global_batch")) * 8, std::stol(col(rows[i], "devices")));
    EXPECT_EQ(col(rows[i], "grad_accum"), "16");
    EXPECT_GT(std::stod(col(rows[i], "bubble_s")), 0);
  }
  EXPECT_DOUBLE_EQ(std::stod(col(rows[1], "efficiency")), 1.0);
  // dp 16: gradients reduced, ZeRO-1 parameters gathered; some of it exposed.
  EXPECT_GT(std::stod(col(rows[2], "dp_s")) + std::stod(col(rows[2], "zero_s")), 0);
  for (const char* f : {"weak_scaling.gp", "weak_scaling.dat", "weak_scaling_parts.gp",
                        "weak_scaling_parts.dat", "weak_scaling.md"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  // A batch that does not make whole sequences at a size is refused, naming the flag.
  r = plan("--cluster " + src() + "/configs/clusters/h100-sxm-80gb.yaml" + k405b +
           " --tp 8 --pp 16 --weak-batch 0.125 --weak-scaling 4 --no-plots --out " + out + "2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--weak-scaling 4"), std::string::npos) << r.output;
}

TEST_F(PlanCli, CalibrateWritesACpuClusterFileThePlanReads) {
  const std::string file = dir_ + "/c.yaml";
  auto r = plan("calibrate --config " + src() +
                "/configs/models/tiny.yaml --devices 1,2"
                " --op-seconds 0.002 --coll-seconds 0.01 --sizes 4096,65536 --out " +
                file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const st::plan::Cluster c = st::plan::load_cluster(file);
  EXPECT_EQ(c.kind, "cpu");
  EXPECT_GT(c.peak_flops, 1e8);
  EXPECT_GT(c.op_seconds.size(), 20u);
  ASSERT_TRUE(c.concurrency.count(2)) << "slowdown at 2 ranks measured";
  int kinds = 0;
  for (const auto& m : c.collectives) {
    kinds += m.ranks == 2;
    // each with the probe's points, one a size, that price the sizes between them
    ASSERT_EQ(m.points.size(), 2u) << m.kind;
    EXPECT_EQ(m.points[0].first, 4096);
    EXPECT_EQ(m.points[1].first, 65536);
    EXPECT_GT(m.points[0].second, 0);
  }
  EXPECT_EQ(kinds, 5) << "all_reduce, reduce_scatter, all_gather, ring_shift, p2p at 2 ranks";
  r = plan("--cluster " + file + " --config " + src() +
           "/configs/models/tiny.yaml --devices 2 --out " + dir_ + "/p --no-plots");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(PlanCli, DryRunAndPlanShareOneMemoryModel) {
  // The same layout through the trainer's --dry-run and the planner.
  const std::string sets =
      " --set model.preset=llama-1b --set model.seq_len=2048"
      " --set train.micro_batch=2 --set train.act_ckpt=selective"
      " --set parallel.zero_stage=2 --set parallel.pp=2 --set train.grad_accum=4";
  auto d = st::test::run_scaletrain(
      4, "--dry-run --config " + src() + "/configs/models/default.yaml" + sets);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  auto r = plan("--cluster " + src() + "/configs/clusters/cpu-local.yaml --config " + src() +
                "/configs/models/default.yaml" + sets +
                " --devices 4 --dp 2 --tp 1 --pp 2 --cp 1 --out " + dir_ + "/d --no-plots");
  const json j = load(fs::path(dir_) / "d/plan.json");
  ASSERT_EQ(j["layouts"].size(), 1u) << r.output;
  // Whether it fits this machine's cluster file decides the status (3: nothing fits).
  EXPECT_EQ(r.exit_code, j["counts"]["feasible"].get<int>() > 0 ? 0 : 3) << r.output;
  const double total = j["layouts"][0]["memory"]["total"].get<double>();
  const int stage = j["layouts"][0]["memory"]["stage"].get<int>();
  // The dry-run's total column (GiB, two decimals) for a rank of that stage.
  const std::regex row(
      R"(^\s+\d+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+\S+\s+\S+ \S+\s+\S+ \S+\s+\S+ \S+\s+\S+ \S+\s+([0-9.]+) GiB)");
  std::istringstream in(d.output);
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row) && std::stoi(m[1]) == stage) {
      EXPECT_NEAR(std::stod(m[2]), total / double(1ull << 30), 0.051)
          << line;  // printed to 0.1 GiB
      found = true;
    }
  }
  EXPECT_TRUE(found) << d.output;
}

// The planner reads no data: the default run config names a uint16 token
// file, which a 128256-token vocabulary would not fit, and that is no reason
// to refuse a plan.
TEST_F(PlanCli, NoDataKeyRefusesAPlan) {
  const std::string out = dir_ + "/vocab";
  auto r = plan("--cluster " + src() +
                "/configs/clusters/h100-sxm-80gb.yaml --set model.vocab_size=128256 --devices 8"
                " --zero 3 --out " +
                out + " --no-plots");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(load(fs::path(out) / "plan.json")["counts"]["feasible"].get<int>(), 0);
}

// Nothing fits: the plan is written, plan.md names the usable memory and
// lists the nearest layouts with their memory parts, and the status is 3.
TEST_F(PlanCli, NothingFitsShowsTheNearestAndExitsThree) {
  const std::string out = dir_ + "/none";
  auto r = plan("--cluster " + src() +
                "/configs/clusters/a100-sxm-40gb.yaml --set model.preset=llama-7b --devices 1"
                " --micro-batch 1,2 --act-ckpt none,full --near 0 --out " +
                out + " --no-plots");
  ASSERT_EQ(r.exit_code, 3) << r.output;
  std::ifstream in(fs::path(out) / "plan.md");
  const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(md.find("No layout is predicted to fit"), std::string::npos) << md;
  const auto at = md.find("Nearest over the memory limit");
  ASSERT_NE(at, std::string::npos) << md;
  int rows = 0;
  for (auto p = md.find("| w ", at); p != std::string::npos; p = md.find("| w ", p + 1)) ++rows;
  EXPECT_EQ(rows, 3) << md;  // --near 0, and still the 3 nearest
  EXPECT_FALSE(fs::exists(fs::path(out) / "campaign.yaml"));
  EXPECT_EQ(check_plan_csv(out), 0);  // every layout timed, each row complete
}

TEST_F(PlanCli, BadInputExitsTwoNamingTheProblem) {
  const std::string cl = " --cluster " + src() + "/configs/clusters/h100-sxm-80gb.yaml";
  struct Bad {
    std::string args, want;
  } bad[] = {
      {"--devices 8", "give --cluster"},
      {cl, "give --devices"},
      {cl + " --devices 8,x", "--devices: 'x' in '8,x' is not a non-negative integer"},
      {cl + " --devices 8 --zero 5", "--zero: 5 is not one of 0,1,2,3"},
      {cl + " --devices 8 --act-ckpt most",
       "--act-ckpt: 'most' is not one of none, selective, full"},
      {cl + " --devices 8 --frobnicate 3", "unknown option '--frobnicate'"},
      {"--cluster /nonexistent.yaml --devices 8", "/nonexistent.yaml"},
      {cl + " --devices 8 --set model.d_modle=3", "did you mean 'model.d_model'"},
      {"compare --cluster " + src() + "/configs/clusters/h100-sxm-80gb.yaml /tmp", "run.json"},
      {"calibrate --devices 1", "give --out"},
      {"replan", "unknown command 'replan'"},
  };
  for (const auto& b : bad) {
    auto r = plan(b.args);
    EXPECT_EQ(r.exit_code, 2) << b.args << "\n" << r.output;
    EXPECT_NE(r.output.find(b.want), std::string::npos) << b.args << "\n" << r.output;
  }
}
}  // namespace
