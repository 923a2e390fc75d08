// scaletrain-plan compare against a real 4-rank run (pp 2 x dp 2): each run
// is predicted at its own node size, read from run.json's hosts, and a run
// whose ranks were placed round robin over the nodes is flagged (the planner
// places ranks in consecutive blocks). The hosts are rewritten in run.json as
// another placement would have written them; the telemetry stays the run's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/util.hpp"
#include "e2e/run_util.hpp"
#include "plan/cluster.hpp"
#include "planner/compare.hpp"

namespace fs = std::filesystem;

namespace {
void set_hosts(const std::string& dir, const nlohmann::json& hosts) {
  const std::string p = (fs::path(dir) / "run.json").string();
  nlohmann::json j = nlohmann::json::parse(st::read_file(p));
  j["hosts"] = hosts;
  std::ofstream(p) << j.dump(2);
}

TEST(PlanCompare, EachRunAtItsOwnNodeSizeAndPlacement) {
  const std::string out = st::test::fresh_dir("plan-compare") + "/run";
  const auto r = st::test::run_scaletrain(
      4, "--config " + st::test::src_dir() +
             "/configs/models/tiny.yaml --set model.n_layers=4 --set train.steps=4"
             " --set parallel.pp=2 --set train.grad_accum=2 --set train.micro_batch=1"
             " --set runtime.threads=1 --set runtime.cpu_peak_gflops=1 --out " +
             out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A cluster whose shared cores slow two ranks on a node down 3x and whose
  // links across nodes are 100x slower than inside one.
  st::plan::Cluster cl =
      st::plan::load_cluster(st::test::src_dir() + "/configs/clusters/cpu-local.yaml");
  cl.concurrency = {{1, 1.0}, {2, 3.0}, {4, 3.0}};
  cl.collectives.clear();
  cl.intra = {1e10, 1e-6};
  cl.inter = {1e8, 1e-4};
  auto row = [&] { return st::plan::compare_runs({out}, cl).at(0); };

  set_hosts(out, {{{"host", "a"}, {"ranks", {0, 1}}}, {{"host", "b"}, {"ranks", {2, 3}}}});
  const auto two = row();
  EXPECT_EQ(two.ranks_per_node, 2);
  EXPECT_TRUE(two.block_placement);

  set_hosts(out, {{{"host", "a"}, {"ranks", {0}}},
                  {{"host", "b"}, {"ranks", {1}}},
                  {{"host", "c"}, {"ranks", {2}}},
                  {{"host", "d"}, {"ranks", {3}}}});
  const auto one = row();
  EXPECT_EQ(one.ranks_per_node, 1);
  EXPECT_TRUE(one.block_placement);
  // Alone on a node a rank computes 3x faster than two sharing one.
  EXPECT_NEAR(two.compute_pred / one.compute_pred, 3.0, 0.01);
  // Every group crosses nodes at one rank per node: more exposed communication.
  EXPECT_GT(one.exposed_pred, two.exposed_pred);
  // The waits are set stage against stage: the stage whose ranks waited
  // longest (step - fwd - bwd - optimizer), against that stage's predicted
  // step less its own compute and optimizer.
  for (const auto& w : {two, one}) {
    EXPECT_GE(w.waits_stage, 0);
    EXPECT_LT(w.waits_stage, 2);
    EXPECT_GT(w.waits_meas, 0);
    EXPECT_GT(w.waits_pred, 0);
    EXPECT_LT(w.waits_pred, w.step_pred);
    EXPECT_LT(w.waits_meas, w.step_meas);
  }

  set_hosts(out, {{{"host", "a"}, {"ranks", {0, 2}}}, {{"host", "b"}, {"ranks", {1, 3}}}});
  const auto by_node = row();
  EXPECT_EQ(by_node.ranks_per_node, 2);
  EXPECT_FALSE(by_node.block_placement);
  fs::remove_all(fs::path(out).parent_path());
}
}  // namespace
