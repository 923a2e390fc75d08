// What the step-time replay overlaps, by what the cluster says of its ranks.
// A collective progresses beside compute only where the backend drives it
// on its own (collective_progress: async; NCCL on a GPU): there the data
// parallel gradient buckets launched during the backward hide behind it.
// MPI requests on the default CPU device progress only while the thread that
// issued them waits (polls, the default of kind cpu): the same buckets are
// exposed whole. And ranks of different pipeline stages sharing a node's
// cores take turns, so they are slowed less than ranks that always compute
// at once (dp peers of one stage). Expectations are relations between
// predictions (exposed = total; slower than alone, faster than all at once),
// never figures read back from the replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/error.hpp"
#include "plan/cluster.hpp"
#include "plan/rates.hpp"
#include "plan/time_model.hpp"

namespace {
using st::Config;
using st::plan::Cluster;
using st::plan::StepPrediction;

std::string src() {
  const char* s = std::getenv("SCALETRAIN_SOURCE_DIR");
  return s ? s : ".";
}

// The emulated cluster's calibration (kind cpu: measured ops, fits, the
// slowdown of ranks sharing a node's quota), with `per_node` ranks a node.
Cluster emu(int per_node) {
  Cluster c = st::plan::load_cluster(src() + "/configs/clusters/emucluster-cpu.yaml");
  c.devices_per_node = per_node;
  return c;
}

// The multi-node study's layouts (results/multinode-cpu-*): the default
// model at seq 128 on the CPU device.
Config study(int dp, int pp, int micro_batch, int grad_accum) {
  Config c =
      st::load_config(src() + "/configs/models/default.yaml",
                      {"model.seq_len=128", "runtime.device=cpu", "train.precision=fp32",
                       "train.micro_batch=" + std::to_string(micro_batch),
                       "train.grad_accum=" + std::to_string(grad_accum),
                       "parallel.dp=" + std::to_string(dp), "parallel.pp=" + std::to_string(pp)});
  st::validate_config(c);
  return c;
}

TEST(PlanOverlap, ProgressIsTheClusterFilesWordDefaultByKind) {
  EXPECT_FALSE(emu(1).async_progress());
  const Cluster h = st::plan::load_cluster(src() + "/configs/clusters/h100-sxm-80gb.yaml");
  EXPECT_TRUE(h.async_progress());
  // Said in the file, it wins over the kind; a wrong value names the key.
  const auto dir = std::filesystem::temp_directory_path() / "st_test_plan_overlap";
  std::filesystem::create_directories(dir);
  const std::string base =
      "name: c\ndevice: cpu\nkind: cpu\npeak_tflops: 0.1\nmemory_gib: 4\ndevices_per_node: 2\n"
      "cores_per_node: 2\nintra_node: {bandwidth_gbps: 1, latency_us: 10}\n"
      "ops: {\"add 1\": 0.001}\n";
  auto load = [&](const std::string& extra) {
    const std::string p = (dir / "c.yaml").string();
    std::ofstream(p) << base << extra;
    return st::plan::load_cluster(p);
  };
  EXPECT_FALSE(load("").async_progress());
  EXPECT_TRUE(load("collective_progress: async\n").async_progress());
  EXPECT_FALSE(load("collective_progress: polls\n").async_progress());
  try {
    load("collective_progress: thread\n");
    ADD_FAILURE() << "collective_progress: thread was accepted";
  } catch (const st::UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("collective_progress"), std::string::npos) << m;
    EXPECT_NE(m.find("async|polls"), std::string::npos) << m;
  }
  // Written back as read.
  Cluster a = load("collective_progress: async\n");
  EXPECT_NE(st::plan::cluster_to_yaml(a).find("collective_progress: async"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PlanOverlap, CpuRanksExposeTheDpAllReduceGpusHideIt) {
  // dp 2 across two nodes, one rank each: four gradient buckets, three of
  // them launched while the backward still runs.
  const Config c = study(2, 1, 2, 1);
  Cluster polls = emu(1), async = emu(1);
  async.progress = 1;
  const StepPrediction p = st::plan::predict_step(c, polls);
  const StepPrediction a = st::plan::predict_step(c, async);
  ASSERT_GT(p.part(st::CommPart::Dp).total, 0);
  // The same collectives at the same prices either way.
  EXPECT_NEAR(a.part(st::CommPart::Dp).total, p.part(st::CommPart::Dp).total,
              1e-9 * p.part(st::CommPart::Dp).total);
  // Polls: nothing of them overlaps the backward; the step is the compute,
  // the optimizer, the whole reduction and the loss / norm reductions.
  EXPECT_NEAR(p.part(st::CommPart::Dp).exposed, p.part(st::CommPart::Dp).total,
              0.01 * p.part(st::CommPart::Dp).total);
  EXPECT_NEAR(p.step, p.compute() + p.optimizer + p.exposed_comm(), 0.01 * p.step);
  // Async: the buckets launched during the backward run beside it.
  EXPECT_LT(a.part(st::CommPart::Dp).exposed, 0.99 * a.part(st::CommPart::Dp).total);
  EXPECT_LT(a.step, p.step);

  // A GPU cluster (NCCL: async by its kind): Llama-2-70B's widths, 4
  // layers, dp 2 over NVLink, ZeRO 1: the gradient buckets hide behind the
  // backward but the last ones.
  Config g = st::load_config(
      "", {"model.preset=llama-70b", "model.n_layers=4", "model.seq_len=4096",
           "runtime.device=cuda", "train.precision=bf16", "train.act_ckpt=full",
           "train.micro_batch=1", "train.grad_accum=1", "parallel.dp=2", "parallel.zero_stage=1"});
  st::validate_config(g);
  Cluster h = st::plan::load_cluster(src() + "/configs/clusters/h100-sxm-80gb.yaml");
  h.devices_per_node = 8;
  const StepPrediction gp = st::plan::predict_step(g, h);
  ASSERT_GT(gp.part(st::CommPart::Dp).total, 0);
  EXPECT_LT(gp.part(st::CommPart::Dp).exposed, 0.5 * gp.part(st::CommPart::Dp).total)
      << "dp exposed " << gp.part(st::CommPart::Dp).exposed << " of "
      << gp.part(st::CommPart::Dp).total << " s";
  // The same file told its collectives progress only in waits: with no
  // other wait in the backward the buckets are exposed whole.
  h.progress = -1;
  const StepPrediction gq = st::plan::predict_step(g, h);
  EXPECT_NEAR(gq.part(st::CommPart::Dp).total, gp.part(st::CommPart::Dp).total,
              1e-9 * gp.part(st::CommPart::Dp).total);
  EXPECT_NEAR(gq.part(st::CommPart::Dp).exposed, gq.part(st::CommPart::Dp).total,
              0.01 * gq.part(st::CommPart::Dp).total);
  EXPECT_GT(gq.step, gp.step);
}

TEST(PlanOverlap, StagesSharingANodeTakeTurns) {
  Cluster one = emu(1), two = emu(2);
  one.host.quota.cpus = two.host.quota.cpus = 0;  // the cores' sharing alone (quota: below)
  const double both = st::plan::concurrency_slowdown(two, 2);
  ASSERT_GT(both, 1.5);
  // pp 2 inside one node: the stages compute at once only part of the time
  // (the bubble, the sends), so their compute is slowed by less than both
  // ranks computing at once, and still by more than none.
  {
    const Config c = study(1, 2, 1, 4);
    const StepPrediction alone = st::plan::predict_step(c, one);
    const StepPrediction shared = st::plan::predict_step(c, two);
    EXPECT_GT(shared.compute(), 1.05 * alone.compute());
    EXPECT_LT(shared.compute(), 0.97 * both * alone.compute())
        << "compute alone " << alone.compute() << " s, on one node " << shared.compute()
        << " s, slowdown of two at once " << both;
  }
  // pp 2 x dp 2, two ranks a node in blocks: each node holds the dp peers
  // of one stage, in step with each other: always both at once.
  {
    const Config c = study(2, 2, 1, 4);
    const StepPrediction alone = st::plan::predict_step(c, one);
    const StepPrediction shared = st::plan::predict_step(c, two);
    EXPECT_NEAR(shared.compute(), both * alone.compute(), 1e-6 * shared.compute());
  }
}

// A CPU quota on each node (cgroup cpu.max: the emulated nodes, a
// container's limit). The calibration priced every kernel at the quota's
// sustained rate, so a rank that computes the whole step is predicted as
// before; ranks of a pipeline stage idle in the bubble and the sends, and
// spend the rest of each period faster than the quota's share: their
// compute is predicted shorter than without the quota, and never shorter
// than at full speed.
TEST(PlanOverlap, AQuotaGivesStagesThatIdleTheRestOfTheirPeriod) {
  const auto with = [](int per_node, double quota) {
    Cluster c = emu(per_node);
    c.host.quota.cpus = quota;
    c.host.quota.period = 0.1;
    return c;
  };
  {
    const Config c = study(1, 1, 2, 1);
    const StepPrediction none = st::plan::predict_step(c, with(1, 0));
    const StepPrediction q = st::plan::predict_step(c, with(1, 0.45));
    EXPECT_NEAR(q.compute(), none.compute(), 0.01 * none.compute());
  }
  // Both stages on one node: one or the other computes nearly all the time,
  // so the node's quota is spent as it would be without idle; the quota's
  // arithmetic and the turns the measured concurrency gives agree.
  {
    const Config c = study(1, 2, 1, 4);
    const StepPrediction none = st::plan::predict_step(c, with(2, 0));
    const StepPrediction q = st::plan::predict_step(c, with(2, 0.45));
    EXPECT_NEAR(q.compute(), none.compute(), 0.03 * none.compute());
  }
  // A node's ranks all of one stage (in blocks, or one a node): they idle
  // together in the bubble and the sends.
  for (const auto& [dp, per_node] : {std::pair{2, 2}, {2, 1}}) {
    const Config c = study(dp, 2, 1, 4);
    const StepPrediction none = st::plan::predict_step(c, with(per_node, 0));
    const StepPrediction q = st::plan::predict_step(c, with(per_node, 0.45));
    const StepPrediction alone = st::plan::predict_step(c, with(1, 0));
    EXPECT_LT(q.compute(), 0.97 * none.compute())
        << "dp " << dp << " pp 2, " << per_node << " a node: compute without the quota "
        << none.compute() << " s, with it " << q.compute() << " s";
    EXPECT_LT(q.step, none.step);
    // Full speed alone is 0.45 of the price of a rank alone at the quota.
    EXPECT_GT(q.compute(), 0.45 * alone.compute());
  }
}

// In blocks, under the quota, each node holds one stage's dp peers. The
// first stage computes in bursts between the pipeline's waits, each burst
// starting on the budget its node saved while idle; the last computes back
// to back at the quota's rate. The study's traces (take d, pp 2 x dp 2 in
// blocks, step 12) show the first stage's compute at 0.60-0.78 of the
// last's for about the same work; a replay that prices every kernel of a
// stage at one average rate gave 0.91, and the waits 41-47% short.
TEST(PlanOverlap, AQuotaFollowedThroughTheStepSpeedsTheStageThatComputesInBursts) {
  Cluster cl = emu(2);
  ASSERT_GT(cl.host.quota.cpus, 0);
  const Config c = study(2, 2, 1, 4);
  const StepPrediction q = st::plan::predict_step(c, cl);
  ASSERT_EQ(q.stage_waits.size(), 2u);
  const double first = q.step - q.stage_waits[0], last = q.step - q.stage_waits[1];
  EXPECT_LT(first, 0.85 * last) << "compute: first stage " << first << " s, last " << last << " s";
  // Without the quota the two stages' work is about the same.
  cl.host.quota.cpus = 0;
  const StepPrediction none = st::plan::predict_step(c, cl);
  const double f0 = none.step - none.stage_waits[0], l0 = none.step - none.stage_waits[1];
  EXPECT_GT(f0, 0.9 * l0) << "without the quota: first stage " << f0 << " s, last " << l0 << " s";
}

// Placement decides which groups cross nodes. pp 2 x dp 2, two ranks a
// node: in blocks (ranks 0,1 | 2,3) each node holds one stage's dp peers,
// so the dp all-reduce stays inside a node and the pipeline's sends cross;
// round robin (0,2 | 1,3: srun --distribution=cyclic, mpirun --rank-by node)
// each node holds a whole pipeline, so the sends stay inside and the dp
// all-reduce crosses. The same placement said rank by rank (compare's
// run.json hosts) predicts the same step as the cluster's word.
TEST(PlanOverlap, PlacementDecidesWhichGroupsCrossNodes) {
  const Config c = study(2, 2, 1, 4);
  Cluster block = emu(2), cyclic = emu(2), hosts = emu(2);
  cyclic.placement = "cyclic";
  hosts.rank_node = {0, 1, 0, 1};
  EXPECT_EQ(block.node_of(2, 4), 1);
  EXPECT_EQ(cyclic.node_of(2, 4), 0);
  EXPECT_EQ(cyclic.node_of(3, 4), 1);
  const StepPrediction b = st::plan::predict_step(c, block);
  const StepPrediction y = st::plan::predict_step(c, cyclic);
  const StepPrediction h = st::plan::predict_step(c, hosts);
  ASSERT_GT(b.part(st::CommPart::Dp).total, 0);
  // The same 2-rank all-reduce, priced by the inter-node fit instead of
  // the one inside a node: slower on the emulated cluster's shaped links.
  EXPECT_GT(y.part(st::CommPart::Dp).total, 2 * b.part(st::CommPart::Dp).total)
      << "dp in blocks " << b.part(st::CommPart::Dp).total << " s, round robin "
      << y.part(st::CommPart::Dp).total << " s";
  EXPECT_GT(y.step, b.step);
  EXPECT_NEAR(h.step, y.step, 1e-9 * y.step);
  EXPECT_NEAR(h.part(st::CommPart::Dp).total, y.part(st::CommPart::Dp).total,
              1e-9 * y.part(st::CommPart::Dp).total);
  // Each node now holds both stages: they take turns, slowed by less than
  // both at once (in blocks: always both at once).
  EXPECT_LT(y.compute(), 0.97 * b.compute());
  // The placement is a cluster-file word: read, checked, written back.
  const auto dir = std::filesystem::temp_directory_path() / "st_test_plan_placement";
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "c.yaml").string();
  std::ofstream(p) << st::plan::cluster_to_yaml(cyclic);
  EXPECT_EQ(st::plan::load_cluster(p).placement, "cyclic");
  std::ofstream(p) << st::plan::cluster_to_yaml(block) << "\nplacement: scatter\n";
  try {
    st::plan::load_cluster(p);
    ADD_FAILURE() << "placement: scatter was accepted";
  } catch (const st::UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("placement"), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

// Each stage's waits: the step less that stage's own compute and
// optimizer. The critical stage's are the step less the prediction's
// compute and optimizer; the first stage (no head and loss) waits at least
// as long as the last.
TEST(PlanOverlap, EachStageWaitsTheStepLessItsOwnWork) {
  for (const auto& [c, per_node] :
       {std::pair{study(1, 2, 1, 4), 2}, {study(2, 2, 1, 4), 2}, {study(4, 1, 2, 1), 1}}) {
    const StepPrediction t = st::plan::predict_step(c, emu(per_node));
    ASSERT_EQ(t.stage_waits.size(), size_t(c.parallel.pp));
    const double critical = t.step - t.compute() - t.optimizer;
    bool found = false;
    for (double w : t.stage_waits) {
      EXPECT_GE(w, 0);
      EXPECT_LT(w, t.step);
      found = found || std::abs(w - critical) <= 1e-9 * t.step;
    }
    EXPECT_TRUE(found) << "no stage waits the step less the critical stage's work, " << critical;
    if (c.parallel.pp == 2) {
      EXPECT_GE(t.stage_waits[0], t.stage_waits[1]);
    }
  }
}

// pp 2 x dp 4 on 4 nodes of 2 ranks: in blocks each dp group holds two
// ranks on each of two nodes; round robin one rank on each of the four,
// beside the other stage's group. Each is priced by the measured all-reduce
// of its own shape (calibrate's pairs launcher), so the two placements'
// dp time stands in the ratio of those measurements; dp across 4 nodes of
// one rank by the one-per-node measurement.
TEST(PlanOverlap, GroupsPricedByTheirShapeOnTheNodes) {
  auto shaped = [](int per_node_cluster) {
    Cluster c = emu(per_node_cluster);
    std::vector<st::plan::MeasuredCollective> keep;
    for (const auto& m : c.collectives)
      if (m.kind != "all_reduce") keep.push_back(m);
    for (auto [per_node, node_ranks, gbps] : {std::tuple{1, 1, 0.02}, {2, 2, 0.04}, {1, 2, 0.03}}) {
      st::plan::MeasuredCollective m;
      m.kind = "all_reduce";
      m.ranks = 4;
      m.inter_node = 1;
      m.per_node = per_node;
      m.node_ranks = node_ranks;
      m.fit = {gbps * 1e9, 0};
      keep.push_back(m);
    }
    c.collectives = keep;
    return c;
  };
  const Config c = study(4, 2, 1, 4);
  Cluster block = shaped(2), cyclic = shaped(2);
  cyclic.placement = "cyclic";
  const StepPrediction b = st::plan::predict_step(c, block);
  const StepPrediction y = st::plan::predict_step(c, cyclic);
  ASSERT_GT(b.part(st::CommPart::Dp).total, 0);
  EXPECT_NEAR(y.part(st::CommPart::Dp).total / b.part(st::CommPart::Dp).total, 0.04 / 0.03, 1e-6)
      << "dp in blocks " << b.part(st::CommPart::Dp).total << " s, round robin "
      << y.part(st::CommPart::Dp).total << " s";
  // dp 4, one rank a node: the (1, 1) measurement, as if it were the only one.
  const Config d = study(4, 1, 2, 1);
  Cluster alone = shaped(1), only = shaped(1);
  std::erase_if(only.collectives, [](const auto& m) {
    return m.kind == "all_reduce" && (m.per_node != 1 || m.node_ranks != 1);
  });
  EXPECT_NEAR(st::plan::predict_step(d, alone).part(st::CommPart::Dp).total,
              st::plan::predict_step(d, only).part(st::CommPart::Dp).total, 1e-12);
}

}  // namespace
