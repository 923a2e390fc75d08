// The timeline, the checkpoint cost and the flight recorder end to end: a
// 4-rank run with ZeRO 2 and a pipeline traced and turned into trace.json by
// scaletrain-analyze trace (every rank's phases for every step, spans well
// formed and ordered per track, clock offsets within their stated bound);
// the three parts of checkpoint cost against the step records, and a slowed
// writer's interference; and a rank stopped with SIGSTOP, or killed with
// SIGKILL, mid-run: the job ends and scaletrain-analyze hang names that rank
// and the collective the others were in.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "run_util.hpp"

using namespace st::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string analyze() { return env_or("SCALETRAIN_ANALYZE", "scaletrain-analyze"); }

std::string tiny(int steps, int global_batch, const std::string& sets) {
  return " --config " + src_dir() +
         "/configs/models/tiny.yaml --set train.steps=" + std::to_string(steps) +
         " --set runtime.cpu_peak_gflops=1" +
         " --set train.micro_batch=" + std::to_string(global_batch) + " " + sets;
}

std::vector<json> lines_of(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

TEST(Trace, FourRanksZero2PipelineOneTimeline) {
  const std::string d = fresh_dir("trace4");
  const int steps = 4;
  auto r = run_scaletrain(4, tiny(steps, 2,
                                  "--set parallel.pp=2 --set parallel.dp=2 --set "
                                  "parallel.zero_stage=2 --set train.grad_accum=2 "
                                  "--set checkpoint.interval=2 --out " +
                                      d));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Clock events: at start and end on every rank, within their bound. All
  // ranks share this host's clock, so the true offset is 0.
  for (int rank = 0; rank < 4; ++rank) {
    int clocks = 0;
    char name[64];
    std::snprintf(name, sizeof name, "/telemetry/rank_%05d.jsonl", rank);
    for (const auto& j : lines_of(d + name))
      if (j.value("event", "") == "clock") {
        ++clocks;
        EXPECT_LE(std::abs(j.at("offset_s").get<double>()), j.at("error_s").get<double>() + 1e-6)
            << "rank " << rank << ": " << j.dump();
      }
    EXPECT_EQ(clocks, 2) << "rank " << rank;
  }

  auto a = run_cmd(analyze() + " trace " + d);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const json t = json::parse(std::ifstream(d + "/analysis/trace.json"));
  ASSERT_TRUE(fs::exists(d + "/analysis/step.svg"));
  ASSERT_TRUE(fs::exists(d + "/analysis/waited.md"));
  std::map<int, std::string> pname;
  std::map<std::pair<int, int>, std::string> tname;
  // (rank, step) -> names seen; (rank, track) -> (seq, ts) of collectives.
  std::map<std::pair<int, int>, std::set<std::string>> seen;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> by_track;
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, double>>> comm_seq;
  for (const auto& e : t.at("traceEvents")) {
    const int pid = e.at("pid").get<int>();
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name") pname[pid] = e.at("args").at("name");
      if (e.at("name") == "thread_name")
        tname[{pid, e.at("tid").get<int>()}] = e.at("args").at("name");
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X");
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    EXPECT_GE(dur, 0.0) << e.dump();  // each begin matched by a later end
    const int step = e.at("args").at("step").get<int>();
    std::string n = e.at("name");
    n = n.substr(0, n.find(' '));
    seen[{pid, step}].insert(n);
    const int tid = e.at("tid").get<int>();
    const std::string& track = tname[{pid, tid}];
    if (track == "compute" || track == "host") by_track[{pid, tid}].push_back({ts, ts + dur});
    if (track.rfind("comm:", 0) == 0)
      comm_seq[{pid, tid}].push_back({e.at("args").at("seq").get<int64_t>(), ts});
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(pname[rank].find("rank " + std::to_string(rank) + " ("), std::string::npos)
        << pname[rank];
    for (int s = 1; s <= steps; ++s)
      for (const char* want : {"data", "fwd", "bwd", "optim", "signal_vote", "step"})
        EXPECT_TRUE(seen[std::make_pair(rank, s)].count(want))
            << "rank " << rank << " step " << s << ": " << want;
    EXPECT_TRUE(seen[std::make_pair(rank, 2)].count("ckpt_write")) << "rank " << rank;
  }
  // The host and compute tracks do one thing at a time, in order.
  for (auto& [key, v] : by_track) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      EXPECT_LE(v[i - 1].second, v[i].first + 1.0)
          << "rank " << key.first << " track " << tname[key] << " overlaps at " << i;
  }
  // A group's collectives start in sequence order on every member.
  int comm_tracks = 0;
  for (auto& [key, v] : comm_seq) {
    ++comm_tracks;
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      EXPECT_LE(v[i - 1].second, v[i].second + 1.0) << tname[key] << " seq " << v[i].first;
  }
  EXPECT_GE(comm_tracks, 4 * 2) << "each rank has a data-parallel and a pipeline track";

  // The run report's straggler section: the time others waited for each
  // rank and host, from the same last arrivals; one host here, so its sum
  // is the ranks' sum.
  auto rep = run_cmd(analyze() + " run " + d + " --no-plots");
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  const json st = json::parse(std::ifstream(d + "/analysis/summary.json")).at("stragglers");
  ASSERT_FALSE(st.at("waited_for_ranks").empty()) << st.dump();
  ASSERT_EQ(st.at("waited_for_hosts").size(), 1u) << st.dump();
  double ranks_sum = 0;
  for (const auto& x : st.at("waited_for_ranks")) ranks_sum += x.at("waited_s").get<double>();
  EXPECT_GT(ranks_sum, 0);
  EXPECT_NEAR(ranks_sum, st.at("waited_for_hosts")[0].at("waited_s").get<double>(), 1e-9);
  std::stringstream md;
  md << std::ifstream(d + "/analysis/report.md").rdbuf();
  EXPECT_NE(md.str().find("Time others waited for this rank"), std::string::npos);
  fs::remove_all(d);
}

// summary.json's checkpoint cost of a run analysed with scaletrain-analyze run.
json ckpt_cost(const std::string& d) {
  auto a = run_cmd(analyze() + " run " + d + " --no-plots");
  EXPECT_EQ(a.exit_code, 0) << a.output;
  return json::parse(std::ifstream(d + "/analysis/summary.json")).at("checkpoint").at("cost");
}

// A model whose step takes long enough that a one-second busy writer covers
// a few steps of the ten between saves, not all of them.
const std::string kWider =
    "--set model.d_model=256 --set model.ffn_hidden=512 --set checkpoint.interval=10 ";

TEST(CheckpointCost, ThreePartsAddUpAgainstTheStepRecords) {
  const std::string d = fresh_dir("ckpt-cost");
  auto r = run_scaletrain(2, tiny(30, 8, kWider + "--out " + d));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cost = ckpt_cost(d);
  // The stall of each save is the slowest rank's ckpt_stall_s at its step,
  // less the wait for the previous save (reported apart).
  std::map<int64_t, double> stall;
  for (int rank = 0; rank < 2; ++rank) {
    char name[64];
    std::snprintf(name, sizeof name, "/telemetry/rank_%05d.jsonl", rank);
    for (const auto& j : lines_of(d + name))
      if (j.value("type", "") == "step")
        stall[j.at("step")] = std::max(stall[j.at("step")], j.at("ckpt_stall_s").get<double>());
  }
  const auto& per = cost.at("per_checkpoint");
  ASSERT_EQ(per.size(), 3u) << cost.dump();
  double total_stall = 0, total_step = 0, total_wait = 0;
  for (const auto& c : per) {
    const int64_t s = c.at("step");
    EXPECT_EQ(s % 10, 0);
    const double own = c.at("stall_s").get<double>(), wait = c.at("wait_prev_s").get<double>();
    EXPECT_LE(own, stall[s] + 1e-12) << "step " << s;
    EXPECT_GE(own + wait, stall[s] - 1e-12) << "step " << s;
    total_wait += wait;
    // Persistence runs from the first snapshot to the last commit: it
    // contains the snapshot, which the stall is (with nothing to wait for).
    EXPECT_GE(c.at("persist_s").get<double>() + 1e-6, c.at("stall_s").get<double>());
    total_stall += c.at("stall_s").get<double>();
  }
  for (const auto& [s, v] : stall) (void)s, total_step += v;
  const json summary = json::parse(std::ifstream(d + "/analysis/summary.json"));
  EXPECT_NEAR(cost.at("stall_share").get<double>() *
                  summary.at("checkpoint").at("total_step_s").get<double>(),
              total_stall, 1e-9);
  EXPECT_LE(total_stall, total_step + 1e-12) << "every stall is at a save's step";
  EXPECT_GE(total_stall + total_wait, total_step - 1e-12) << "every stall is at a save's step";
  fs::remove_all(d);
}

// Async saves closer together than a save takes (a writer busy 1 s, a save
// every 2 short steps): each save first waits for the previous one. That
// wait is the previous save outlasting the interval; a save's cost C (its
// stall) leaves it out and the report gives it apart (issue 56).
TEST(CheckpointCost, AsyncCostLeavesOutTheWaitForThePreviousSave) {
  const std::string d = fresh_dir("ckpt-backlog");
  auto r = run_scaletrain(
      2, tiny(8, 8, "--set checkpoint.interval=2 --set checkpoint.test_busy_write_s=1 --out " + d));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cost = ckpt_cost(d);
  const auto& per = cost.at("per_checkpoint");
  ASSERT_GE(per.size(), 3u) << cost.dump();
  for (size_t i = 1; i < per.size(); ++i) {
    const double own = per[i].at("stall_s").get<double>();
    const double wait = per[i].at("wait_prev_s").get<double>();
    EXPECT_GT(wait, 0.3) << "the previous save was still writing: " << per[i].dump();
    EXPECT_LT(own, 0.5 * wait) << "C without the wait: " << per[i].dump();
  }
  const std::string md = [&] {
    std::ifstream f(d + "/analysis/report.md");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  EXPECT_NE(md.find("waited for the previous save (s)"), std::string::npos) << md;
  fs::remove_all(d);
}

TEST(CheckpointCost, SlowedWriterShowsInterference) {
  const std::string d = fresh_dir("ckpt-slow");
  auto r =
      run_scaletrain(2, tiny(30, 8, kWider + "--set checkpoint.test_busy_write_s=1 --out " + d));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cost = ckpt_cost(d);
  double worst = -1e9;
  int during = 0;
  for (const auto& c : cost.at("per_checkpoint")) {
    worst = std::max(worst, c.at("interference_s").get<double>());
    during += c.at("steps_during").get<int>();
    EXPECT_GE(c.at("persist_s").get<double>(), 1.0) << "the writer was busy 1 s: " << c.dump();
  }
  EXPECT_GT(during, 0) << cost.dump();
  EXPECT_GT(worst, 0.0) << cost.dump();
  EXPECT_GT(cost.at("interference_s").get<double>(), 0.0) << cost.dump();
  fs::remove_all(d);
}

// Rank 2 of 4 (data parallel) stops or dies at the start of step 3.
void hang_case(const char* how, const std::string& name) {
  const std::string d = fresh_dir(name);
  setenv("SCALETRAIN_FAULT", (std::string(how) + ":2:3:step").c_str(), 1);
  auto r = run_scaletrain(4, tiny(6, 4, "--set runtime.timeout_s=5 --out " + d));
  unsetenv("SCALETRAIN_FAULT");
  EXPECT_NE(r.exit_code, 0) << r.output;
  auto h = run_cmd(analyze() + " hang " + d);
  ASSERT_EQ(h.exit_code, 0) << h.output << "\n--- the run:\n" << r.output;
  EXPECT_NE(h.output.find("never entered by rank(s) 2."), std::string::npos) << h.output;
  EXPECT_NE(h.output.find("on group '"), std::string::npos) << h.output;
  EXPECT_NE(h.output.find("| 0 | "), std::string::npos) << h.output;
  std::printf("%s", h.output.c_str());  // the report, for the closing note
  fs::remove_all(d);
}

TEST(Hang, StoppedRankIsNamed) { hang_case("stop", "hang-stop"); }
TEST(Hang, KilledRankIsNamed) { hang_case("kill", "hang-kill"); }

}  // namespace
