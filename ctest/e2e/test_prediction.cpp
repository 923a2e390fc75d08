// Predicted beside measured in every run: a 2-rank CPU run writes its own
// prediction into run.json at start, and scaletrain-analyze run's report.md
// shows predicted against measured step time, memory and MFU, each error
// equal to predicted / measured - 1 of the two printed numbers, and
// scaletrain-analyze campaign lists the run's three beside each other. With a
// cluster file that cannot be read, run.json records why the step time is
// not predicted (memory still is) and the report says so. The trainer's
// summary line and report.md print the same tok/s and MFU (one steady state).
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "run_util.hpp"

namespace {
using namespace st::test;
std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), {}};
}
std::string analyze() { return env_or("SCALETRAIN_ANALYZE", "scaletrain-analyze"); }

RunResult run(const std::string& dir, const std::string& env, const std::string& extra = "") {
  return run_cmd(env + mpiexec() + " --oversubscribe --bind-to none -n 2 " + bin() + " --config " +
                 src_dir() + "/configs/models/tiny.yaml" +
                 " --set train.steps=12 --set parallel.dp=2 --out " + dir + extra);
}

// Half a unit of a printed number's last decimal: how far the printed value
// may be from the one the report computed with.
double half_ulp(const std::string& cell) {
  const auto dot = cell.find('.');
  if (dot == std::string::npos) return 0.5;
  size_t digits = 0;
  while (dot + 1 + digits < cell.size() &&
         std::isdigit(static_cast<unsigned char>(cell[dot + 1 + digits])))
    ++digits;
  return 0.5 * std::pow(10.0, -double(digits));
}

// The section's table rows: quantity -> (predicted, measured, error %,
// half-ulp of the predicted and of the measured cell).
std::map<std::string, std::array<double, 5>> section_rows(const std::string& md) {
  std::map<std::string, std::array<double, 5>> rows;
  const auto at = md.find("## Predicted vs measured");
  if (at == std::string::npos) return rows;
  std::istringstream in(md.substr(at, md.find("\n## ", at + 5) - at));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| quantity", 0) == 0) continue;
    std::vector<std::string> cells;
    std::istringstream ls(line);
    std::string c;
    while (std::getline(ls, c, '|')) cells.push_back(c);
    if (cells.size() < 5) continue;
    rows[cells[1].substr(1, cells[1].size() - 2)] = {std::stod(cells[2]), std::stod(cells[3]),
                                                     std::stod(cells[4]), half_ulp(cells[2]),
                                                     half_ulp(cells[3])};
  }
  return rows;
}

TEST(Prediction, TwoRankRunReportsPredictedAgainstMeasured) {
  const std::string d = fresh_dir("prediction");
  auto r = run(d, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_text(d + "/run.json"));
  ASSERT_TRUE(j.contains("prediction")) << j.dump(1);
  const auto& p = j["prediction"];
  ASSERT_FALSE(p.contains("absent")) << p.dump(1);
  EXPECT_GT(p["step_s"].get<double>(), 0);
  EXPECT_GT(p["memory"]["peak_bytes"].get<double>(), 0);
  // the source tree's cluster file is named relative to the tree: a
  // committed run names no checkout's absolute path (test_self_contained)
  EXPECT_EQ(p["cluster"].get<std::string>(), "configs/clusters/cpu-local.yaml");
  auto a = run_cmd(analyze() + " run " + d + " --no-plots");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto rows = section_rows(read_text(d + "/analysis/report.md"));
  for (const char* q : {"step time", "peak memory", "MFU (at the run's peak)", "tokens/s",
                        "compute part", "comm part"}) {
    ASSERT_TRUE(rows.count(q)) << q;
    const auto& [pred, meas, err, hp, hm] = rows.at(q);
    ASSERT_GT(meas, 0) << q;
    // The error is computed from the unrounded numbers and printed to 0.1%;
    // the numbers are printed to a few decimals, so the error the printed
    // numbers allow is a range (a measured 0.00001 s may be 0.000005 s).
    if (meas - hm <= 0) continue;
    const double lo = 100 * ((pred - hp) / (meas + hm) - 1);
    const double hi = 100 * ((pred + hp) / (meas - hm) - 1);
    EXPECT_GE(err, lo - 0.05) << q;
    EXPECT_LE(err, hi + 0.05) << q;
  }
  // the predicted step equals run.json's, as printed (5 decimals)
  EXPECT_NEAR(rows.at("step time")[0], p["step_s"].get<double>(), 5e-6);
  // campaign: the same three quantities in one row for the run
  auto c = run_cmd(analyze() + " campaign " + d + " --no-plots --out " + d + "/camp");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const std::string cm = read_text(d + "/camp/report.md");
  const auto at = cm.find("## Predicted vs measured");
  ASSERT_NE(at, std::string::npos) << cm;
  EXPECT_NE(cm.find("| " + d + " | ", at), std::string::npos) << cm.substr(at);
  std::filesystem::remove_all(d);
}

TEST(Prediction, UnreadableClusterFileIsRecordedNotInvented) {
  const std::string d = fresh_dir("prediction-absent");
  auto r = run(d, "SCALETRAIN_CLUSTER_FILE=" + d + "/no-such-cluster.yaml ");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto p = nlohmann::json::parse(read_text(d + "/run.json"))["prediction"];
  ASSERT_TRUE(p.contains("absent")) << p.dump(1);
  EXPECT_NE(p["absent"].get<std::string>().find("no-such-cluster.yaml"), std::string::npos);
  EXPECT_FALSE(p.contains("step_s"));
  EXPECT_GT(p["memory"]["peak_bytes"].get<double>(), 0);
  auto a = run_cmd(analyze() + " run " + d + " --no-plots");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string md = read_text(d + "/analysis/report.md");
  EXPECT_NE(md.find("Step time not predicted: "), std::string::npos);
  const auto rows = section_rows(md);
  EXPECT_TRUE(rows.count("peak memory"));
  EXPECT_FALSE(rows.count("step time"));
  std::filesystem::remove_all(d);
}

// runtime.cluster names the file that describes where the run runs (a
// campaign's own calibration): run.json's prediction and report.md use it
// and name it relative to the repository it lies in, never by a machine's
// absolute path; a missing file is refused naming the key (issue 56).
TEST(Prediction, RuntimeClusterIsUsedAndNamedRelativeToItsRepository) {
  const std::string d = fresh_dir("prediction-cluster");
  namespace fs = std::filesystem;
  fs::create_directories(d + "/repo/.git");  // a checkout other than the trainer's
  fs::create_directories(d + "/repo/study");
  fs::copy_file(src_dir() + "/configs/clusters/cpu-local.yaml", d + "/repo/study/cluster.yaml");
  auto r = run(d + "/run", "", " --set runtime.cluster=" + d + "/repo/study/cluster.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto p = nlohmann::json::parse(read_text(d + "/run/run.json"))["prediction"];
  EXPECT_EQ(p.value("cluster", ""), "study/cluster.yaml") << p.dump(1);
  EXPECT_TRUE(p.contains("step_s")) << p.dump(1);
  auto a = run_cmd(analyze() + " run " + d + "/run --no-plots");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string md = read_text(d + "/run/analysis/report.md");
  EXPECT_NE(md.find("on `study/cluster.yaml`"), std::string::npos) << md;
  EXPECT_EQ(md.find(d + "/repo"), std::string::npos) << "no absolute cluster path: " << md;
  r = run(d + "/run2", "", " --set runtime.cluster=" + d + "/none.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("runtime.cluster: '" + d + "/none.yaml': no such file"),
            std::string::npos)
      << r.output;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace

// One steady state: the trainer's last line and scaletrain-analyze's report
// take the window and statistic from metrics::steady_state, so both print
// the same tokens/s, tokens/s per device and MFU to the printed precision.
TEST(Prediction, TrainerSummaryAndReportAgree) {
  const std::string d = fresh_dir("steady-state");
  auto r = run(d, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex done(
      "steady state \\(median step [0-9.]+ s, .*?\\) ([0-9.]+) tok/s, ([0-9.]+) tok/s per "
      "device, MFU ([0-9.]+)% of .*HFU ([0-9.]+)%");
  ASSERT_TRUE(std::regex_search(r.output, m, done)) << r.output;
  auto a = run_cmd(analyze() + " run " + d + " --no-plots");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string md = read_text(d + "/analysis/report.md");
  auto cell = [&](const std::string& row) {
    const auto at = md.find("| " + row + " | ");
    EXPECT_NE(at, std::string::npos) << row << "\n" << md;
    if (at == std::string::npos) return std::string();
    const auto b = at + row.size() + 5;
    return md.substr(b, md.find(" |", b) - b);
  };
  EXPECT_EQ(m[1].str(), cell("tokens/s")) << r.output;
  EXPECT_EQ(m[2].str(), cell("tokens/s per GPU")) << r.output;
  EXPECT_EQ(m[3].str() + "% / " + m[4].str() + "%", cell("MFU / HFU")) << r.output;
  std::filesystem::remove_all(d);
}
