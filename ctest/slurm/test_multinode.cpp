// Multi-node tests on an emulated cluster (scripts/emucluster.sh): 4 nodes,
// each a network + UTS namespace with its own hostname on a private bridge,
// one slurmd each, MPI over TCP between nodes and shared memory inside one.
//  - MpirunAgent: 4 nodes x 2 ranks through plain mpirun and the namespace
//    launch agent, with a checkpoint: 4 hosts in run.json and the telemetry,
//    4 in the straggler table.
//  - SlowNodeIsSlowestHost: node3 gets a small CPU quota (0.05 CPU for its
//    2 ranks; 16 sequences per rank so computing, not waiting, meets the
//    quota); the straggler report names it first.
//  - SlurmFourNodes: the first test's run through sbatch and srun --mpi=pmix.
//  - CyclicPlacementUnderSrunAndMpirun: SCALETRAIN_PLACEMENT=cyclic puts the
//    ranks round robin over 2 nodes under both launchers.
//  - CalibrateTimesEveryShapeOfAGroupOnTheNodes: scaletrain-plan calibrate
//    with its three probe launchers (one rank per node, all on node1, two
//    per node) writes each all-reduce in the shape the probe measured.
//  - NodeFailureDuringStep / NodeFailureDuringCheckpoint: every process of
//    node3 is killed; the job ends within runtime.timeout_s + 5 s naming the
//    node and its ranks, Slurm requeues it, it resumes on 3 nodes (dp 6) from
//    the last committed checkpoint and finishes every step.
// Exits 77 (skipped) where namespaces or Slurm are not available.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "../e2e/run_util.hpp"
#include "slurm_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using st::test::run_cmd;
using st::test::slurm::load_json;
using st::test::slurm::q;
using st::test::slurm::slurp;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const std::string kScript = "scripts/emucluster.sh";
// The trainer settings of every run here: the tiny model, 2 sequences per rank.
const std::string kTiny =
    "--config configs/models/tiny.yaml --set train.micro_batch=2 --set runtime.cpu_peak_gflops=10";

struct RankFile {
  std::string host;
  std::vector<long> steps;
  std::vector<json> events;
};
RankFile read_rank(const std::string& run, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.jsonl", rank);
  RankFile f;
  std::ifstream in(fs::path(run) / "telemetry" / name);
  std::string line;
  while (std::getline(in, line)) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    const std::string t = j.value("type", "");
    if (t == "header" && f.host.empty()) f.host = j.value("host", "");
    if (t == "step") f.steps.push_back(j.at("step").get<long>());
    if (t == "event") f.events.push_back(j);
  }
  return f;
}

class MultiNode : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    auto chk = sh_raw("bash " + kScript + " check");
    if (chk.exit_code != 0) {
      // ctest counts exit 77 as skipped (SKIP_RETURN_CODE).
      std::printf("SKIP: the emulated cluster cannot run here: %s\n", chk.output.c_str());
      std::fflush(stdout);
      std::_Exit(77);
    }
    dir_ = (fs::temp_directory_path() / ("scaletrain-multinode-" + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    auto up = sh_raw("bash " + kScript + " start " + q(dir_) + " --nodes 4 --cpus 2 --owner " +
                     std::to_string(::getpid()));
    start_out_ = up.output;
    started_ = up.exit_code == 0;
  }
  static void TearDownTestSuite() {
    if (dir_.empty()) return;
    auto r = sh_raw("bash " + kScript + " stop " + q(dir_));
    if (r.exit_code != 0) std::printf("emucluster stop: %s\n", r.output.c_str());
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0 &&
        std::getenv("SCALETRAIN_KEEP_SLURM") == nullptr)
      fs::remove_all(dir_);
    else
      std::printf("emulated cluster folder kept: %s\n", dir_.c_str());
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(started_) << "could not start the emulated cluster in " << dir_ << ":\n"
                          << start_out_;
  }
  static st::test::RunResult sh_raw(const std::string& cmd) {
    return run_cmd("cd " + q(st::test::src_dir()) + " && " + cmd);
  }
  // A shell line with the cluster's client environment (Slurm, MPI's subnet,
  // the launch agent) and this build's binaries.
  static st::test::RunResult sh(const std::string& cmd) {
    const std::string build = st::test::env_or("SCALETRAIN_BUILD_DIR", ".");
    const std::string pre =
        ". " + q(dir_ + "/env") + " && cd " + q(st::test::src_dir()) +
        " && export SCALETRAIN_ANALYZE=" + q(build + "/analysis/scaletrain-analyze") +
        " SCALETRAIN_PLAN=" + q(build + "/analysis/scaletrain-plan") +
        " SCALETRAIN_BIN=" + q(st::test::bin()) + " && ";
    return run_cmd("bash -c " + q("set -euo pipefail; " + pre + cmd));
  }
  static bool wait_jobs(const std::string& id, int timeout_s) {
    for (int i = 0; i < timeout_s * 2; ++i) {
      auto r = sh("squeue -h -o %i -j " + id);
      if (r.exit_code == 0 && r.output.find_first_not_of(" \n") == std::string::npos) return true;
      sleep_ms(500);
    }
    return false;
  }
  static std::string diagnostics() {
    return sh("squeue; sinfo -N; tail -n 20 " + q(dir_ + "/log/slurmctld.log")).output;
  }
  static std::string submit(const std::string& sbatch_args, const std::string& trainer_args) {
    return submit_env("", sbatch_args, trainer_args);
  }
  static std::string submit_env(const std::string& env, const std::string& sbatch_args,
                                const std::string& trainer_args) {
    auto r = sh(env + "sbatch --parsable " + sbatch_args + " slurm/scaletrain.sbatch " + kTiny +
                " " + trainer_args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output.substr(0, r.output.find_first_of(";\n"));
  }
  // Ranks of `run` are on `nodes` distinct emulated hosts, `per_node` each,
  // in run.json and in every rank's telemetry header; the straggler table
  // of scaletrain-analyze lists every host.
  static void expect_hosts(const std::string& run, int nodes, int per_node) {
    json rj = load_json(fs::path(run) / "run.json");
    ASSERT_FALSE(rj.is_discarded()) << run << "/run.json";
    ASSERT_EQ(rj["hosts"].size(), size_t(nodes)) << rj["hosts"].dump();
    // Ranks across nodes talk over TCP: two connections a pair, as the
    // runtime asks Open MPI for (docs/design.md), read back from MPI itself.
    EXPECT_EQ(rj["versions"].value("mpi_tcp_links", -1), 2) << rj["versions"].dump();
    std::set<std::string> names;
    for (const auto& h : rj["hosts"]) {
      names.insert(h.value("host", ""));
      EXPECT_EQ(h["ranks"].size(), size_t(per_node)) << h.dump();
    }
    EXPECT_EQ(names.size(), size_t(nodes));
    for (int r = 0; r < nodes * per_node; ++r) {
      RankFile f = read_rank(run, r);
      EXPECT_EQ(names.count(f.host), 1u) << "rank " << r << " header host '" << f.host << "'";
    }
    auto a = sh("\"$SCALETRAIN_ANALYZE\" run " + q(run) + " --no-plots");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    json sj = load_json(fs::path(run) / "analysis/summary.json");
    ASSERT_FALSE(sj.is_discarded());
    const auto& hosts = sj["stragglers"]["hosts"];
    ASSERT_EQ(hosts.size(), size_t(nodes)) << sj["stragglers"].dump();
    for (const auto& h : hosts) EXPECT_EQ(names.count(h.value("host", "")), 1u) << h.dump();
    const std::string md = slurp(fs::path(run) / "analysis/report.md");
    for (const auto& n : names) EXPECT_NE(md.find("| " + n + " |"), std::string::npos) << n;
  }
  static void node_failure(const std::string& name, bool during_ckpt);
  static std::string dir_, start_out_;
  static bool started_;
};
std::string MultiNode::dir_, MultiNode::start_out_;
bool MultiNode::started_ = false;

TEST_F(MultiNode, MpirunAgent) {
  const std::string out = dir_ + "/mpirun4";
  auto r =
      sh("timeout 300 mpirun --hostfile \"$EMUCLUSTER_DIR/hostfile\" -np 8 --map-by ppr:2:node"
         " --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \"$SCALETRAIN_BIN\" " +
         kTiny + " --set train.steps=6 --set checkpoint.interval=3 --out " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step_00000006/index.json")) << r.output;
  expect_hosts(out, 4, 2);
}

TEST_F(MultiNode, SlowNodeIsSlowestHost) {
  const std::string out = dir_ + "/slow";
  ASSERT_EQ(sh("bash " + kScript + " cpu \"$EMUCLUSTER_DIR\" node3 0.05").exit_code, 0);
  auto r =
      sh("timeout 300 mpirun --hostfile \"$EMUCLUSTER_DIR/hostfile\" -np 8 --map-by ppr:2:node"
         " --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \"$SCALETRAIN_BIN\" " +
         kTiny + " --set train.micro_batch=16 --set train.steps=6 --out " + q(out));
  sh("bash " + kScript + " cpu \"$EMUCLUSTER_DIR\" node3 none");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_hosts(out, 4, 2);
  json sj = load_json(fs::path(out) / "analysis/summary.json");
  ASSERT_FALSE(sj["stragglers"]["slowest_hosts"].empty());
  EXPECT_EQ(sj["stragglers"]["slowest_hosts"][0]["host"], "node3") << sj["stragglers"].dump(1);
}

TEST_F(MultiNode, SlurmFourNodes) {
  const std::string out = dir_ + "/slurm4";
  const std::string id =
      submit("--nodes=4 --ntasks-per-node=2 --output=" + q(dir_ + "/slurm4-%j.out"),
             "--set train.steps=6 --set checkpoint.interval=3 --out " + q(out));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(wait_jobs(id, 300)) << "job " << id << " did not finish\n" << diagnostics();
  const std::string log = slurp(dir_ + "/slurm4-" + id + ".out");
  EXPECT_NE(log.find("launch: srun --mpi=pmix"), std::string::npos) << log;
  EXPECT_NE(sh("scontrol show job " + id).output.find("JobState=COMPLETED"), std::string::npos)
      << log;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step_00000006/index.json")) << log;
  expect_hosts(out, 4, 2);
}

// SCALETRAIN_PLACEMENT=cyclic (a plan's --placement cyclic, its campaign's
// `placement`): scaletrain.sbatch places the ranks round robin over the
// nodes, under srun (--distribution=cyclic) and under mpirun (--rank-by
// node); run.json's hosts say where each rank ran, as compare reads them.
TEST_F(MultiNode, CyclicPlacementUnderSrunAndMpirun) {
  for (const std::string launcher : {"srun", "mpirun"}) {
    const std::string out = dir_ + "/cyclic-" + launcher;
    const std::string id = submit_env(
        "SCALETRAIN_PLACEMENT=cyclic SCALETRAIN_LAUNCHER=" + launcher + " ",
        "--nodes=2 --ntasks-per-node=2 --output=" + q(dir_ + "/cyclic-" + launcher + "-%j.out"),
        "--set train.steps=2 --out " + q(out));
    ASSERT_FALSE(id.empty());
    ASSERT_TRUE(wait_jobs(id, 300)) << "job " << id << " did not finish\n" << diagnostics();
    const std::string log = slurp(dir_ + "/cyclic-" + launcher + "-" + id + ".out");
    EXPECT_NE(log.find(launcher == "srun" ? "--distribution=cyclic" : "--rank-by node"),
              std::string::npos)
        << log;
    json rj = load_json(fs::path(out) / "run.json");
    ASSERT_EQ(rj["hosts"].size(), 2u) << log << rj["hosts"].dump();
    for (const auto& h : rj["hosts"]) {
      ASSERT_EQ(h["ranks"].size(), 2u) << h.dump();
      const int a = h["ranks"][0].get<int>(), b = h["ranks"][1].get<int>();
      EXPECT_EQ(std::abs(a - b), 2) << launcher << ": " << rj["hosts"].dump();
    }
  }
  // A placement the launcher cannot make is refused, naming the variable.
  const std::string id = submit_env("SCALETRAIN_PLACEMENT=round ",
                                    "--nodes=1 --output=" + q(dir_ + "/badplace-%j.out"),
                                    "--set train.steps=1 --out " + q(dir_ + "/badplace"));
  ASSERT_TRUE(wait_jobs(id, 120)) << diagnostics();
  const std::string log = slurp(dir_ + "/badplace-" + id + ".out");
  EXPECT_NE(log.find("SCALETRAIN_PLACEMENT='round': expected block or cyclic"), std::string::npos)
      << log;
}

// Inside a node with a CPU quota (emucluster.sh cpu: cgroup cpu.max or
// cpu.cfs_quota_us), calibrate writes the quota and its period to the file,
// what the planner prices a node's idle by (cpu_quota); the quota goes when
// the test ends, on every path.
TEST_F(MultiNode, CalibrateWritesTheNodesCpuQuota) {
  const std::string file = dir_ + "/quota.yaml";
  ASSERT_EQ(sh_raw("bash " + kScript + " cpu " + q(dir_) + " node2 0.6").exit_code, 0);
  struct Lift {
    ~Lift() { sh_raw("bash " + kScript + " cpu " + q(dir_) + " node2 none"); }
  } lift;
  const auto r = sh("bash " + kScript + " exec " + q(dir_) +
                    " node2 \"cd $PWD && timeout 300 $SCALETRAIN_PLAN calibrate --config "
                    "configs/models/tiny.yaml --devices 1 --op-seconds 0.002 --out " +
                    file + "\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = slurp(file);
  EXPECT_NE(text.find("\ncpu_quota: {cpus: 0.6, period_us: 100000}"), std::string::npos) << text;
}

// Every pid of `node` whose command is the trainer.
// The planner's calibration across the emulated nodes with all three
// probe launchers: one rank per node, every rank on node1, two ranks per
// node. The file holds each all-reduce in the shape the probe reported,
// measured, not said by the launcher: (ranks, per_node, node_ranks) of one
// rank per node, of ranks inside node1, of a group with two members on each
// node and of two groups side by side with one member on each node.
TEST_F(MultiNode, CalibrateTimesEveryShapeOfAGroupOnTheNodes) {
  const std::string file = dir_ + "/calibrated.yaml";
  const std::string hf = "--hostfile \"$EMUCLUSTER_DIR/hostfile\"";
  auto r = sh("SCALETRAIN_PLAN_PROBE=\"$(dirname \"$SCALETRAIN_PLAN\")/scaletrain-plan-probe\" "
              "SCALETRAIN_MPIEXEC='mpirun " + hf + " --map-by ppr:1:node' "
              "SCALETRAIN_MPIEXEC_NODE='mpirun --host node1:2' "
              "SCALETRAIN_MPIEXEC_PAIRS='mpirun " + hf + " --map-by ppr:2:node' "
              "timeout 300 \"$SCALETRAIN_PLAN\" calibrate --config configs/models/tiny.yaml "
              "--devices 1,2 --op-seconds 0.002 --coll-seconds 0.01 --sizes 4096,65536 --out " +
              q(file));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--groups node-local"), std::string::npos) << r.output;
  const std::string text = slurp(file);
  // Each all-reduce entry's "ranks inter_node per_node node_ranks".
  const std::regex entry(
      "kind: all_reduce, ranks: (\\d+),[^}]*inter_node: (true|false), per_node: (\\d+), "
      "node_ranks: (\\d+)");
  std::set<std::string> got;
  for (std::sregex_iterator it(text.begin(), text.end(), entry), end; it != end; ++it)
    got.insert((*it)[1].str() + " " + (*it)[2].str() + " " + (*it)[3].str() + " " +
               (*it)[4].str());
  const std::set<std::string> want = {"2 true 1 1", "2 false 2 2", "4 true 2 2", "2 true 1 2"};
  EXPECT_EQ(got, want) << text;
}

std::vector<int> trainer_pids(const std::string& pids_out) {
  std::vector<int> v;
  size_t pos = 0;
  while (pos < pids_out.size()) {
    size_t nl = pids_out.find('\n', pos);
    if (nl == std::string::npos) nl = pids_out.size();
    const std::string line = pids_out.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string comm = slurp("/proc/" + line + "/comm");
    if (comm.rfind("scaletrain", 0) == 0) v.push_back(std::stoi(line));
  }
  return v;
}
char proc_state(int pid) {  // the state letter of /proc/PID/stat, or 0
  const std::string st = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t p = st.rfind(')');
  return p == std::string::npos || p + 2 >= st.size() ? 0 : st[p + 2];
}

// Kills node3 during a step (after the first checkpoint), or node4 while its
// rank 6 is inside step 8's checkpoint write (SCALETRAIN_FAULT stops it there;
// the 6-rank rerun has no rank 6, so the fault does not fire again), then
// checks detection, the requeue on 3 nodes and that no step is lost.
void MultiNode::node_failure(const std::string& name, bool during_ckpt) {
  const std::string out = dir_ + "/" + name;
  const long steps = 24, interval = 4, timeout_s = 15;
  // Any node count: 2 ranks on each node the job gets (docs/campaigns.md).
  const std::string env = std::string("SCALETRAIN_RANKS_PER_NODE=2 ") +
                          (during_ckpt ? "SCALETRAIN_FAULT=stop:6:8:dataset " : "");
  const std::string victim = during_ckpt ? "node4" : "node3";
  const std::vector<std::string> alive = during_ckpt
                                             ? std::vector<std::string>{"node1", "node2", "node3"}
                                             : std::vector<std::string>{"node1", "node2", "node4"};
  const int first_rank = during_ckpt ? 6 : 4;
  const std::string id =
      submit_env(env, "--nodes=3-4 --exclusive --output=" + q(dir_ + "/" + name + "-%j.out"),
                 "--set train.steps=" + std::to_string(steps) +
                     " --set checkpoint.interval=" + std::to_string(interval) +
                     " --set runtime.timeout_s=" + std::to_string(timeout_s) + " --out " + q(out));
  ASSERT_FALSE(id.empty());
  const fs::path log = dir_ + "/" + name + "-" + id + ".out";
  // Wait for the moment to fail: step 6 done (step 4 committed), or rank 6
  // stopped inside step 8's write.
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    if (during_ckpt) {
      for (int pid :
           trainer_pids(sh("bash " + kScript + " pids \"$EMUCLUSTER_DIR\" " + victim).output))
        ready = ready || proc_state(pid) == 'T';
    } else {
      ready = read_rank(out, 0).steps.size() >= 6 && fs::exists(out + "/checkpoints/latest");
    }
    if (!ready) sleep_ms(200);
  }
  ASSERT_TRUE(ready) << "job " << id << " never reached the point of failure\n"
                     << slurp(log) << diagnostics();
  const auto t_kill = Clock::now();
  const double epoch_kill =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto k = sh("bash " + kScript + " kill-node \"$EMUCLUSTER_DIR\" " + victim);
  ASSERT_EQ(k.exit_code, 0) << k.output;
  // Ended: no trainer left on the surviving nodes (their cgroups read
  // directly, every 50 ms, so the poll adds little to the figure).
  const std::string cluster = slurp(dir_ + "/cluster");
  const size_t tp = cluster.find("tag=");
  ASSERT_NE(tp, std::string::npos) << cluster;
  const std::string tag = cluster.substr(tp + 4, cluster.find('\n', tp) - tp - 4);
  double ended_s = -1;
  for (int i = 0; i < 4000 && ended_s < 0; ++i) {
    size_t n = 0;
    for (const auto& node : alive)
      n += trainer_pids(slurp("/sys/fs/cgroup/cpu/scaletrain-emu-" + tag + "/n" + node.substr(4) +
                              "/cgroup.procs"))
               .size();
    if (n == 0)
      ended_s = secs(t_kill, Clock::now());
    else
      sleep_ms(50);
  }
  ASSERT_GE(ended_s, 0) << "the ranks on the surviving nodes did not end\n" << slurp(log);
  // The last commit before the failure is read once no rank of the first run
  // is left: an asynchronous commit (step 8's, say) may still land between
  // the moment chosen to fail and the kill, and the resume must start there.
  const std::string committed = slurp(out + "/checkpoints/latest");
  EXPECT_LE(ended_s, double(timeout_s) + 5) << slurp(log);
  ASSERT_TRUE(wait_jobs(id, 600)) << "job " << id << " did not finish after the failure\n"
                                  << slurp(log) << diagnostics();
  const std::string joblog = slurp(log);
  // The error names the node and its ranks.
  EXPECT_NE(joblog.find(victim), std::string::npos) << joblog;
  // The watchdog's words: "World ranks 4 (host node3), 5 (host node3) did not answer".
  for (int r : {first_rank, first_rank + 1})
    EXPECT_NE(joblog.find(std::to_string(r) + " (host " + victim + ")"), std::string::npos)
        << "rank " << r << "\n"
        << joblog;
  // Requeued by the batch script (it saw the node stop answering) or by
  // Slurm (it marked the node down first and cancelled the job for node
  // failure; the script logs the SIGTERM): a race both sides may win.
  const bool by_script =
      joblog.find("requeueing job " + id + " to resume on the remaining nodes") != std::string::npos;
  const bool by_slurm = joblog.find("DUE TO NODE FAILURE") != std::string::npos &&
                        joblog.find("Slurm ended the job (SIGTERM) while this script waited") !=
                            std::string::npos;
  EXPECT_TRUE(by_script || by_slurm) << joblog;
  auto show = sh("scontrol show job " + id).output;
  EXPECT_NE(show.find("JobState=COMPLETED"), std::string::npos) << show << joblog;
  EXPECT_NE(show.find("Restarts=1"), std::string::npos) << show << joblog;
  EXPECT_NE(show.find("NumNodes=3"), std::string::npos) << show << joblog;
  // The second run: 3 hosts, dp 6, resumed from the commit before the kill.
  json rj = load_json(fs::path(out) / "run.json");
  EXPECT_EQ(rj["hosts"].size(), 3u) << rj["hosts"].dump();
  EXPECT_EQ(rj["hosts"].dump().find(victim), std::string::npos) << rj["hosts"].dump();
  RankFile r0 = read_rank(out, 0);
  long from = -1;
  double resumed_at = -1;
  for (const auto& e : r0.events)
    if (e.value("event", "") == "ckpt_resume") {
      from = e.value("from_step", -1L);
      resumed_at = e.value("t", -1.0);
    }
  const long committed_step = std::stol(committed.substr(committed.find("step_") + 5));
  EXPECT_EQ(from, committed_step) << "resumed from another step than the last commit";
  if (during_ckpt) {
    EXPECT_EQ(committed_step, 4) << "step 8's interrupted write must not count";
  }
  // Nothing lost: every step 1..steps was run, the last run ends at `steps`.
  std::set<long> seen(r0.steps.begin(), r0.steps.end());
  for (long s = 1; s <= steps; ++s) EXPECT_EQ(seen.count(s), 1u) << "step " << s << " never ran";
  ASSERT_FALSE(r0.steps.empty());
  EXPECT_EQ(r0.steps.back(), steps);
  long redone = long(r0.steps.size()) - steps;
  EXPECT_FALSE(r0.events.empty());
  EXPECT_EQ(r0.events.back().value("status", ""), "ok");
  std::printf(
      "node failure (%s): ended %.1f s after the kill (timeout_s %ld), resumed %.1f s "
      "after it from step %ld on 3 nodes, %ld step(s) redone, 0 lost\n",
      (name + ", " + victim).c_str(), ended_s, timeout_s, resumed_at - epoch_kill, from, redone);
  auto rv = sh("bash " + kScript + " revive \"$EMUCLUSTER_DIR\" " + victim);
  EXPECT_EQ(rv.exit_code, 0) << rv.output;
}

TEST_F(MultiNode, NodeFailureDuringStep) { node_failure("fail-step", false); }
TEST_F(MultiNode, NodeFailureDuringCheckpoint) { node_failure("fail-ckpt", true); }

}  // namespace
