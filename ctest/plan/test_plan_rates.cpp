// The kernel-level rates of GPU cluster files (lib/plan/rates.cpp): the
// tables read back exactly as written, each priced call equal to the
// arithmetic of the table row it falls on or between (worked out here, not
// read back from the code), and bad tables refused naming file and key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "plan/cluster.hpp"
#include "plan/quota.hpp"
#include "plan/rates.hpp"

namespace {
using st::plan::Cluster;
using st::plan::Op;
using st::plan::OpKind;

std::string src() {
  const char* s = std::getenv("SCALETRAIN_SOURCE_DIR");
  return s ? s : ".";
}

std::string temp_file(const std::string& text) {
  const auto p =
      std::filesystem::temp_directory_path() / ("st_rates_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << text;
  return p.string();
}

// A GPU cluster with one row per table and nothing else that could matter:
// no kernel overhead, memory so fast that no call is memory-bound; priced
// by fractions (all 1 here) of its rates.
const char* kSmall = R"(name: t
device: H100 SXM
memory_gib: 80
memory_bandwidth_gbps: 1000000
devices_per_node: 8
intra_node: {bandwidth_gbps: 450, latency_us: 3}
inter_node: {bandwidth_gbps: 50, latency_us: 8}
pricing: fitted
efficiency: {kernel_overhead_us: 0}
rates:
  gemm:
    - {m: 4096, n: 4096, k: 4096, tflops: 700}
    - {m: 1024, n: 8192, k: 8192, tflops: 500}
  attention:
    - {head_dim: 128, seq: 1024, fwd_tflops: 400, bwd_tflops: 300}
    - {head_dim: 128, seq: 4096, fwd_tflops: 600, bwd_tflops: 500}
  busbw_intra:
    - {bytes: 1048576, gbps: 100}
    - {bytes: 1073741824, gbps: 400}
  busbw_inter:
    - {bytes: 1073741824, gbps: 320}
)";

Op gemm(int64_t m, int64_t n, int64_t k) {
  Op o;
  o.kind = OpKind::Gemm;
  o.s[0] = m, o.s[1] = n, o.s[2] = k;
  return o;
}
Op attn(OpKind kind, int64_t T, int64_t hd) {
  Op o;
  o.kind = kind;
  const int64_t s[6] = {1, T, 16, 16, hd, 1};
  for (int i = 0; i < 6; ++i) o.s[i] = s[i];
  return o;
}

// One sequence of T tokens (a ring block: T queries over T keys, recorded
// as cp 2), Hq query and Hkv key heads.
Op attn_op(OpKind kind, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, int64_t cp) {
  Op o;
  o.kind = kind;
  const int64_t s[6] = {1, T, Hq, Hkv, hd, cp};
  for (int i = 0; i < 6; ++i) o.s[i] = s[i];
  return o;
}

TEST(PlanRates, TablesRoundTripThroughTheWriter) {
  const std::string p = temp_file(kSmall);
  const Cluster a = st::plan::load_cluster(p);
  const std::string q = temp_file(st::plan::cluster_to_yaml(a));
  const Cluster b = st::plan::load_cluster(q);
  std::filesystem::remove(q);
  ASSERT_EQ(b.rates.gemm.size(), 2u);
  ASSERT_EQ(b.rates.attention.size(), 2u);
  ASSERT_EQ(b.rates.intra.size(), 2u);
  ASSERT_EQ(b.rates.inter.size(), 1u);
  EXPECT_EQ(b.rates.gemm[1].m, 1024);
  EXPECT_EQ(b.rates.gemm[1].k, 8192);
  EXPECT_DOUBLE_EQ(b.rates.gemm[1].flops, 500e12);
  EXPECT_EQ(b.rates.attention[1].head_dim, 128);
  EXPECT_DOUBLE_EQ(b.rates.attention[1].bwd_flops, 500e12);
  EXPECT_DOUBLE_EQ(b.rates.intra[1].bytes, 1073741824.0);
  EXPECT_DOUBLE_EQ(b.rates.inter[0].busbw, 320e9);
}

TEST(PlanRates, GemmOnARowAndBetweenRows) {
  const Cluster c = st::plan::load_cluster(temp_file(kSmall));
  const double f = 2.0 * 4096 * 4096 * 4096;
  EXPECT_NEAR(st::plan::op_seconds(gemm(4096, 4096, 4096), c, 1), f / 700e12, 1e-12);
  // smallest dimension 2048: halfway between 1024 and 4096 in log -> 600
  const double f2 = 2.0 * 2048 * 8192 * 8192;
  EXPECT_NEAR(st::plan::op_seconds(gemm(2048, 8192, 8192), c, 1), f2 / 600e12, 1e-12);
  // below the rows: the 1024 row scaled by the fill factor x/(x+256)
  const double f3 = 2.0 * 256 * 8192 * 8192;
  const double r3 = 500e12 * (256.0 / 512) / (1024.0 / 1280);
  EXPECT_NEAR(st::plan::op_seconds(gemm(256, 8192, 8192), c, 1), f3 / r3, 1e-12);
}

TEST(PlanRates, AttentionBySequenceLength) {
  const Cluster c = st::plan::load_cluster(temp_file(kSmall));
  // causal forward: 4 * B * H * hd * T^2 / 2
  const double f = 4.0 * 16 * 128 * 2048.0 * 2048 / 2;
  EXPECT_NEAR(st::plan::op_seconds(attn(OpKind::AttnFwd, 2048, 128), c, 1), f / 500e12, 1e-12);
  EXPECT_NEAR(st::plan::op_seconds(attn(OpKind::AttnBwd, 2048, 128), c, 1), 2.5 * f / 400e12,
              1e-12);
  // beyond the rows: clamped to the last one; head dim 64 takes 128's rows
  const double f8 = 4.0 * 16 * 64 * 8192.0 * 8192 / 2;
  EXPECT_NEAR(st::plan::op_seconds(attn(OpKind::AttnFwd, 8192, 64), c, 1), f8 / 600e12, 1e-12);
}

TEST(PlanRates, CollectivesFromBusBandwidth) {
  const Cluster c = st::plan::load_cluster(temp_file(kSmall));
  const double G = 1073741824.0;
  // all_reduce over 8 inside a node: bytes * 2 * 7/8 / busbw
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllReduce}, G, 8, false, c, 8),
              G * 1.75 / 400e9, 1e-12);
  // 32 MiB: log-halfway between 1 MiB and 1 GiB -> 250 GB/s; all_gather (n-1)/n
  const double m = 32.0 * 1048576;
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllGather}, m, 4, false, c, 4),
              m * 0.75 / 250e9, 1e-12);
  // across nodes with 4 of the 8 devices of each node in the group: half the NICs
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::ReduceScatter}, G, 16, true, c, 4),
              G * 15 / 16 / 160e9, 1e-12);
  // tiny message: never below one link latency
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllReduce}, 8, 8, false, c, 8), 3e-6,
              1e-12);
}

TEST(PlanRates, IntraAndInterNodeFractionsApartOrOneForBoth) {
  // efficiency.network scales the fabric between nodes, network_intra the
  // links inside one; a file that gives only network uses it for both.
  const double G = 1073741824.0;
  auto with = [&](const std::string& eff) {
    std::string t = kSmall;
    const std::string from = "efficiency: {kernel_overhead_us: 0}";
    t.replace(t.find(from), from.size(), "efficiency: {kernel_overhead_us: 0, " + eff + "}");
    return st::plan::load_cluster(temp_file(t));
  };
  const Cluster apart = with("network: 0.25, network_intra: 0.8");
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllReduce}, G, 8, false, apart, 8),
              G * 1.75 / (0.8 * 400e9), 1e-12);
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::ReduceScatter}, G, 16, true, apart, 8),
              G * 15 / 16 / (0.25 * 320e9), 1e-12);
  const Cluster back = st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(apart)));
  EXPECT_DOUBLE_EQ(back.eff.network, 0.25);
  EXPECT_DOUBLE_EQ(back.eff.intra(), 0.8);
  const Cluster one = with("network: 0.5");
  EXPECT_DOUBLE_EQ(one.eff.intra(), 0.5);
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllReduce}, G, 8, false, one, 8),
              G * 1.75 / (0.5 * 400e9), 1e-12);
  EXPECT_FALSE(
      st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(one))).eff.network_intra_given);
}

// The error load_cluster gives for `text` ("" when it loads).
std::string error(const std::string& text) {
  try {
    st::plan::load_cluster(temp_file(text));
  } catch (const st::UsageError& e) {
    return e.what();
  }
  return "";
}

// Each bad variant of `file` (its first `good` replaced by the variant) is
// refused with every phrase listed.
using BadVariants = std::vector<std::pair<std::string, std::vector<std::string>>>;
void expect_refused(const std::string& file, const std::string& good, const BadVariants& bad) {
  for (const auto& [variant, says] : bad) {
    std::string text = file;
    text.replace(text.find(good), good.size(), variant);
    const std::string e = error(text);
    for (const auto& w : says) EXPECT_NE(e.find(w), std::string::npos) << variant << ": " << e;
  }
}

// The head of a small CPU cluster file, up to its measured collectives.
constexpr const char* kCpuHead = R"(name: c
device: cpu
kind: cpu
peak_tflops: 0.1
memory_gib: 4
devices_per_node: 2
cores_per_node: 2
threads_per_rank: 1
intra_node: {bandwidth_gbps: 2, latency_us: 5}
collectives:
)";

TEST(PlanRates, MeasuredCollectivesPricedOnTheirSideOfTheNodeBoundary) {
  // A CPU file calibrated with one probe across nodes and one inside a node
  // (calibrate with SCALETRAIN_MPIEXEC_NODE): a group that crosses nodes is
  // priced by the inter_node fit, one inside a node by the other, each at
  // latency + bytes / bandwidth; a fit without the key serves both sides.
  const std::string file =
      std::string(kCpuHead) +
      R"(  - {kind: all_reduce, ranks: 2, latency_us: 100, bandwidth_gbps: 0.1, inter_node: true}
  - {kind: all_reduce, ranks: 2, latency_us: 10, bandwidth_gbps: 1, inter_node: false}
  - {kind: p2p, ranks: 2, latency_us: 50, bandwidth_gbps: 0.5}
ops:
  "add 1024": 1e-06
)";
  const Cluster c = st::plan::load_cluster(temp_file(file));
  const double B = 1e8;
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllReduce}, B, 2, true, c, 1),
              100e-6 + B / 0.1e9, 1e-12);
  EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::AllReduce}, B, 2, false, c, 2),
              10e-6 + B / 1e9, 1e-12);
  for (bool inter : {false, true})
    EXPECT_NEAR(st::plan::collective_seconds({st::CollKind::SendRecv}, B, 2, inter, c, 1),
                50e-6 + B / 0.5e9, 1e-12);
  // The writer keeps the flags (and leaves the unflagged fit unflagged).
  const Cluster back = st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(c)));
  ASSERT_EQ(back.collectives.size(), 3u);
  int flags[3] = {0, 0, 0};
  for (const auto& m : back.collectives) flags[m.inter_node + 1] += 1;
  EXPECT_EQ(flags[0], 1);  // unsaid
  EXPECT_EQ(flags[1], 1);  // inside
  EXPECT_EQ(flags[2], 1);  // across
  std::string bad = file;
  bad.replace(bad.find("inter_node: true"), 16, "inter_node: yes");
  try {
    st::plan::load_cluster(temp_file(bad));
    ADD_FAILURE() << "inter_node: yes accepted";
  } catch (const st::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("inter_node"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("true|false"), std::string::npos) << e.what();
  }
}

// A measured collective with the probe's points is priced from the points
// around the size (linear between them, the largest's rate beyond it, the
// fit or the smallest's time below it), not from one line over every size:
// here the fit says 50 MB/s, the 16 and 32 MB points say 32 MB/s, as CPU
// ranks under a quota measured (small messages run at the burst). A group
// of another size is rescaled by the ring factors, as a fit is.
TEST(PlanRates, MeasuredPointsPriceTheSizesBetweenThem) {
  const std::string file =
      std::string(kCpuHead) +
      R"(  - {kind: all_reduce, ranks: 2, latency_us: 20, bandwidth_gbps: 0.05, inter_node: true,
     points: [[65536, 0.001], [16777216, 0.5], [33554432, 1.05]]}
ops:
  "add 1024": 1e-06
)";
  const Cluster c = st::plan::load_cluster(temp_file(file));
  ASSERT_EQ(c.collectives.size(), 1u);
  const auto ar = [&](double bytes, int ranks) {
    return st::plan::collective_seconds({st::CollKind::AllReduce}, bytes, ranks, true, c, 1);
  };
  const double mb25 = 25.0 * (1 << 20);
  // Between 16 and 32 MB: on the line through the two points.
  EXPECT_NEAR(ar(mb25, 2), 0.5 + (mb25 - 16777216.0) / 16777216.0 * 0.55, 1e-12);
  // The fit alone would say 20 us + 25 MB / 50 MB/s: a third less.
  EXPECT_LT(20e-6 + mb25 / 0.05e9, 0.75 * ar(mb25, 2));
  // On a point, beyond the largest (its rate), below the smallest (the fit, at most the smallest's
  // time).
  EXPECT_NEAR(ar(16777216, 2), 0.5, 1e-12);
  EXPECT_NEAR(ar(2 * 33554432.0, 2), 2.1, 1e-12);
  EXPECT_NEAR(ar(4096, 2), 20e-6 + 4096 / 0.05e9, 1e-12);
  EXPECT_NEAR(ar(60000, 2), std::min(0.001, 20e-6 + 60000 / 0.05e9), 1e-12);
  // 4 ranks from the 2-rank points: latency steps 2(n-1) against 2, bytes 2(n-1)/n against 1.
  EXPECT_NEAR(ar(mb25, 4), 20e-6 * 6 / 2 + (ar(mb25, 2) - 20e-6) * 1.5, 1e-12);
  // The writer keeps the points, bytes exact.
  const Cluster back = st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(c)));
  ASSERT_EQ(back.collectives.size(), 1u);
  EXPECT_EQ(back.collectives[0].points, c.collectives[0].points);
  // Points out of order, or not a pair, are named.
  expect_refused(file, "[16777216, 0.5]",
                 {{"[16, 0.5]", {"collectives[0].points[1]", "ascending"}},
                  {"[16777216]", {"collectives[0].points[1]' must be a pair"}},
                  {"[16777216, -1]", {"points[1][1] (seconds)"}}});
}

// The same 4-rank all-reduce measured in three shapes on the nodes (as
// calibrate's pairs launcher does): one member per node alone on it, two
// members on each of two nodes, and one member per node beside another
// group's member. A group is priced by the measurement of its own shape,
// whatever the order of the file; at another group size by the same shape
// rescaled; a file without shapes prices by side and size as before. Shapes
// that cannot be are refused, naming the entry.
TEST(PlanRates, MeasuredCollectivesPricedInTheirShapeOnTheNodes) {
  const std::string file =
      std::string(kCpuHead) +
      R"(  - {kind: all_reduce, ranks: 4, latency_us: 0, bandwidth_gbps: 0.03, inter_node: true, per_node: 1, node_ranks: 2}
  - {kind: all_reduce, ranks: 4, latency_us: 0, bandwidth_gbps: 0.02, inter_node: true, per_node: 1, node_ranks: 1}
  - {kind: all_reduce, ranks: 4, latency_us: 0, bandwidth_gbps: 0.04, inter_node: true, per_node: 2, node_ranks: 2}
  - {kind: all_reduce, ranks: 2, latency_us: 0, bandwidth_gbps: 0.5, inter_node: false, per_node: 2, node_ranks: 2}
ops:
  "add 1024": 1e-06
)";
  const Cluster c = st::plan::load_cluster(temp_file(file));
  const double B = 1e7;
  const auto ar = [&](int ranks, bool inter, int per_node, int node_ranks) {
    return st::plan::collective_seconds({st::CollKind::AllReduce}, B, ranks, inter, c, per_node,
                                        node_ranks);
  };
  EXPECT_NEAR(ar(4, true, 1, 1), B / 0.02e9, 1e-12);
  EXPECT_NEAR(ar(4, true, 2, 2), B / 0.04e9, 1e-12);
  EXPECT_NEAR(ar(4, true, 1, 2), B / 0.03e9, 1e-12);
  // 8 ranks, two on each of 4 nodes: the (2, 2) shape, bytes 2(n-1)/n rescaled.
  EXPECT_NEAR(ar(8, true, 2, 2), B / 0.04e9 * (14.0 / 8) / (6.0 / 4), 1e-12);
  // Inside a node: the inside measurement, whatever the shape asked.
  EXPECT_NEAR(ar(2, false, 2, 2), B / 0.5e9, 1e-12);
  // Unsaid (0) matches every shape: the first measured at the nearest size.
  EXPECT_NEAR(ar(4, true, 1, 0), B / 0.03e9, 1e-12);
  // The writer keeps the shapes.
  const Cluster back = st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(c)));
  ASSERT_EQ(back.collectives.size(), c.collectives.size());
  for (size_t i = 0; i < c.collectives.size(); ++i) {
    EXPECT_EQ(back.collectives[i].per_node, c.collectives[i].per_node) << i;
    EXPECT_EQ(back.collectives[i].node_ranks, c.collectives[i].node_ranks) << i;
  }
  expect_refused(
      file, "per_node: 2, node_ranks: 2",
      {{"per_node: 5, node_ranks: 5", {"collectives[2].per_node", "outside [1, 4]"}},
       {"per_node: 2, node_ranks: 1", {"collectives[2].node_ranks", "outside [2,"}},
       {"per_node: 4, node_ranks: 4", {"collectives[2]", "inter_node true with per_node 4"}},
       {"per_node: two, node_ranks: 2", {"collectives[2].per_node", "expected a number"}},
       {"per_node: 1.5, node_ranks: 2", {"collectives[2].per_node", "not a whole number"}}});
}

// A node under a CPU quota (cgroup cpu.max): its ranks together get
// cpus x period of CPU time per period. Ranks that compute the whole step
// run at the quota's share; a rank that idles part of a period spends the
// rest of it at full speed. Figures are the quota's own arithmetic.
TEST(PlanRates, AQuotaGivesRanksThatIdleTheRestOfTheirPeriod) {
  using Busy = std::vector<std::vector<std::pair<double, double>>>;
  st::plan::QuotaNode q;
  q.cpus = 0.45;
  q.period = 0.1;
  q.cores = 2;
  const auto cpu = [&](const Busy& b, const std::vector<int>& ranks, double step) {
    return st::plan::quota_cpu_seconds(b, ranks, step, q);
  };
  // Always busy: one rank at the quota; two (in step, or apart) share it.
  EXPECT_NEAR(cpu({{{0, 1.3}}}, {1}, 1.3)[0], 0.45 * 1.3, 1e-9);
  EXPECT_NEAR(cpu({{{0, 1.3}}}, {2}, 1.3)[0], 0.225 * 1.3, 1e-9);
  const auto two = cpu({{{0, 1.3}}, {{0, 1.3}}}, {1, 1}, 1.3);
  EXPECT_NEAR(two[0], 0.225 * 1.3, 1e-9);
  EXPECT_NEAR(two[1], 0.225 * 1.3, 1e-9);
  // 20 ms of work every period: under the quota, full speed.
  EXPECT_NEAR(cpu({{{0, 0.02}}}, {1}, 0.1)[0], 0.02, 1e-9);
  // 100 ms busy after 300 ms idle: the chunk straddles two periods with
  // full budgets; over the phases between the quota (0.045) and twice it,
  // 0.0698 in the mean (the sim's four grid offsets: 0.0688).
  const double burst = cpu({{{0.3, 0.4}}}, {1}, 0.4)[0];
  EXPECT_GT(burst, 0.06);
  EXPECT_LT(burst, 0.08);
  // Two ranks in step with the same pattern share it; taking turns (one
  // busy while the other idles) each gets what it gets alone.
  EXPECT_NEAR(cpu({{{0.3, 0.4}}}, {2}, 0.4)[0], burst / 2, 0.1 * burst);
  const auto turns = cpu({{{0.1, 0.2}}, {{0.3, 0.4}}}, {1, 1}, 0.4);
  EXPECT_NEAR(turns[0], burst, 0.1 * burst);
  EXPECT_NEAR(turns[1], burst, 0.1 * burst);
  // The cores bind before a quota above them: 4 ranks on 2 cores, 3 CPUs.
  q.cpus = 3;
  EXPECT_NEAR(cpu({{{0, 1}}}, {4}, 1)[0], 0.5, 1e-9);
  // Sharing the cores costs more than the quota's share (extra(a)).
  q.cpus = 0.45;
  q.extra = [](int a) { return a > 1 ? 1.25 : 1.0; };
  EXPECT_NEAR(cpu({{{0, 1.3}}}, {2}, 1.3)[0], 0.225 * 1.3 / 1.25, 1e-9);
  EXPECT_NEAR(cpu({{{0, 1.3}}}, {1}, 1.3)[0], 0.45 * 1.3, 1e-9);
  // No quota, or nothing busy: nothing to price.
  q.cpus = 0;
  EXPECT_EQ(cpu({{{0, 1}}}, {1}, 1)[0], 0);
}

// The quota followed through a step (QuotaClock): a bucket of one period's
// budget, refilled at the quota's rate, spent at the node's full draw.
// Figures are the bucket's own arithmetic.
TEST(PlanRates, AQuotaClockSpendsTheBucketThenTheQuota) {
  st::plan::QuotaNode q;
  q.cpus = 0.45;
  q.period = 0.1;
  q.cores = 2;
  // One rank, kernels priced at the quota's rate (0.45 CPU-s of work a
  // priced second). Bucket empty: a run takes its price.
  st::plan::QuotaClock c = st::plan::quota_clock(q, 1, 0.45, 0);
  EXPECT_NEAR(c.run(0, 1.0), 1.0, 1e-12);
  // 0.2 s idle puts 0.09 CPU-s back, capped at one period's 0.045: a run
  // priced 1 s spends it at full speed (0.045 / 0.55 s), the rest at 0.45.
  const double burst = 0.045 / 0.55;
  EXPECT_NEAR(c.run(1.2, 1.0) - 1.2, burst + (0.45 - burst) / 0.45, 1e-12);
  // A short run the bucket covers goes at full speed, and leaves the rest.
  c = st::plan::quota_clock(q, 1, 0.45, 1);  // clamped to the bucket, 0.045
  EXPECT_NEAR(c.tokens, 0.045, 1e-15);
  EXPECT_NEAR(c.run(0, 0.02 / 0.45), 0.02, 1e-12);
  EXPECT_NEAR(c.tokens, 0.045 - 0.02 * 0.55, 1e-12);
  // Two ranks in step: the node draws 2 CPUs, each rank goes at 0.225 once
  // the bucket is empty; the extra cost of sharing the cores on top.
  q.extra = [](int a) { return a > 1 ? 1.25 : 1.0; };
  c = st::plan::quota_clock(q, 2, 0.45, 0);
  EXPECT_NEAR(c.run(0, 1.0), 0.45 / (0.225 / 1.25), 1e-9);
  c = st::plan::quota_clock(q, 2, 0.45, 0.045);
  const double b2 = 0.045 / (2 - 0.45);  // seconds at 1 CPU a rank (/1.25)
  EXPECT_NEAR(c.run(0, 1.0), b2 + (0.45 - b2 / 1.25) / (0.225 / 1.25), 1e-9);
  // A quota above what the cores give never binds: 4 ranks on 2 cores.
  q.extra = nullptr;
  q.cpus = 3;
  c = st::plan::quota_clock(q, 4, 0.5, 0);
  EXPECT_NEAR(c.run(0, 1.0), 1.0, 1e-12);
  // No ranks (a stage sharing its node): the price as it is.
  c = st::plan::quota_clock(q, 0, 0.5, 0);
  EXPECT_EQ(c.run(2, 0.5), 2.5);
}

// `cpu_quota` in a cluster file: read, written back, and refused where
// wrong, naming the key and the valid range.
TEST(PlanRates, CpuQuotaIsAClusterFileFact) {
  const std::string file = std::string(kCpuHead) +
                           R"(  - {kind: all_reduce, ranks: 2, latency_us: 0, bandwidth_gbps: 0.5}
cpu_quota: {cpus: 0.45, period_us: 50000}
ops:
  "add 1024": 1e-06
)";
  const Cluster c = st::plan::load_cluster(temp_file(file));
  EXPECT_DOUBLE_EQ(c.host.quota.cpus, 0.45);
  EXPECT_DOUBLE_EQ(c.host.quota.period, 0.05);
  const Cluster back = st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(c)));
  EXPECT_DOUBLE_EQ(back.host.quota.cpus, 0.45);
  EXPECT_DOUBLE_EQ(back.host.quota.period, 0.05);
  // Unsaid: none, and the period the kernel defaults to.
  std::string none = file;
  none.erase(none.find("cpu_quota"), none.find("\nops:") + 1 - none.find("cpu_quota"));
  const Cluster n = st::plan::load_cluster(temp_file(none));
  EXPECT_EQ(n.host.quota.cpus, 0);
  EXPECT_EQ(st::plan::cluster_to_yaml(n).find("cpu_quota"), std::string::npos);
  expect_refused(file, "{cpus: 0.45, period_us: 50000}",
                 {{"{cpus: 0, period_us: 50000}", {"cpu_quota.cpus"}},
                  {"{cpus: 0.45, period_us: 10}", {"cpu_quota.period_us", "1000"}},
                  {"{period_us: 50000}", {"cpu_quota.cpus"}},
                  {"{cpus: 0.45, burst_us: 0}", {"burst_us"}},
                  {"0.45", {"cpu_quota"}}});
  std::string gpu = file;
  gpu.replace(gpu.find("kind: cpu"), 9, "kind: gpu\npricing: fitted\nmemory_bandwidth_gbps: 1000");
  EXPECT_NE(error(gpu).find("'cpu_quota' is a kind: cpu fact"), std::string::npos) << error(gpu);
}

TEST(PlanRates, BadTablesNameFileAndKey) {
  std::string base = kSmall;
  const std::string no_tflops =
      base.substr(0, base.find("rates:")) + "rates:\n  gemm:\n    - {m: 1, n: 2, k: 3}\n";

  EXPECT_NE(error(no_tflops).find("missing key 'rates.gemm[0].tflops'"), std::string::npos)
      << error(no_tflops);
  const std::string bad_key = base.substr(0, base.find("rates:")) + "rates:\n  gemms: []\n";
  EXPECT_NE(error(bad_key).find("unknown key 'rates.gemms'"), std::string::npos) << error(bad_key);
  const std::string neg = base.substr(0, base.find("rates:")) +
                          "rates:\n  busbw_intra:\n    - {bytes: 1024, gbps: -3}\n";
  EXPECT_NE(error(neg).find("rates.busbw_intra[0].gbps"), std::string::npos) << error(neg);
  const std::string not_list = base.substr(0, base.find("rates:")) + "rates:\n  attention: 3\n";
  EXPECT_NE(error(not_list).find("'rates.attention' must be a list"), std::string::npos)
      << error(not_list);
}

// The shipped H100 and H200 files load, carry every table, and the H200
// memory is the 143771 MiB the device reports.
TEST(PlanRates, ShippedGpuFilesCarryRates) {
  for (const char* f : {"h100-sxm-80gb.yaml", "h200-141gb.yaml"}) {
    const Cluster c = st::plan::load_cluster(src() + "/configs/clusters/" + f);
    EXPECT_FALSE(c.rates.gemm.empty()) << f;
    EXPECT_FALSE(c.rates.attention.empty()) << f;
    EXPECT_FALSE(c.rates.intra.empty()) << f;
    EXPECT_FALSE(c.rates.inter.empty()) << f;
  }
  const Cluster h200 = st::plan::load_cluster(src() + "/configs/clusters/h200-141gb.yaml");
  EXPECT_NEAR(h200.memory_bytes / 1048576.0, 143771, 5);
  const Cluster h100 = st::plan::load_cluster(src() + "/configs/clusters/h100-sxm-80gb.yaml");
  EXPECT_NEAR(h100.memory_bytes / 1048576.0, 81559, 5);
  // Both priced by their rates as they are (our trainer), with the MPT fit
  // as a named profile: NVLink / NVSwitch at the nccl-tests busbw as
  // measured there too, the fabric's fraction mpt-fit's.
  for (const Cluster* c : {&h100, &h200}) {
    EXPECT_EQ(c->pricing, "rates");
    EXPECT_FALSE(c->rates.memory.empty());
    EXPECT_GE(c->rates.launch, 0);
    EXPECT_DOUBLE_EQ(c->eff.gemm * c->eff.attention * c->eff.network * c->eff.intra(), 1);
    const Cluster fit = st::plan::with_profile(*c, st::plan::kPublishedProfile);
    EXPECT_TRUE(fit.fitted());
    EXPECT_DOUBLE_EQ(fit.eff.intra(), 1);
    EXPECT_LT(fit.eff.network, 1);
    EXPECT_LT(fit.eff.attention, 1);
  }
  // The A100 files have no kernel rates: fitted fractions of the peaks, and
  // they say so.
  for (const char* f : {"a100-sxm-80gb.yaml", "a100-sxm-40gb.yaml"})
    EXPECT_EQ(st::plan::load_cluster(src() + "/configs/clusters/" + f).pricing, "fitted") << f;
}

// pricing: rates. The tables as they are, no fraction: a GEMM at its own
// shape's row when the table has one (any order of the dimensions), else
// by its smallest dimension; a memory-bound op from its bytes at the
// bandwidth interpolated over `memory`; every call plus launch_us; an
// attention call at its causal row; a ring block (cp > 1 in the op) for
// half its pairs (the zig-zag split's unmasked half) at the `full` rows at
// the chunk length, or without them at the causal rows at its query length.
const char* kRates = R"(name: r
device: H100 SXM
memory_gib: 80
memory_bandwidth_gbps: 3350
devices_per_node: 8
intra_node: {bandwidth_gbps: 450, latency_us: 3}
pricing: rates
profiles:
  slow: {gemm: 0.5, attention: 0.25, memory: 0.5, kernel_overhead_us: 10}
rates:
  gemm:
    - {m: 4096, n: 4096, k: 4096, tflops: 700}
    - {m: 1024, n: 8192, k: 8192, tflops: 500}
    - {m: 8192, n: 8192, k: 8192, tflops: 800}
    - {m: 1024, n: 1024, k: 1024, tflops: 250}
  attention:
    - {head_dim: 128, seq: 1024, fwd_tflops: 400, bwd_tflops: 300}
    - {head_dim: 128, seq: 4096, fwd_tflops: 600, bwd_tflops: 500}
  memory:
    - {bytes: 1000000, gbps: 500}
    - {bytes: 100000000, gbps: 2000}
  launch_us: 3
)";

TEST(PlanRates, RatesPricingUsesTheTablesAsTheyAre) {
  const std::string file = temp_file(kRates);
  const Cluster c = st::plan::load_cluster(file);
  ASSERT_EQ(c.pricing, "rates");
  const double launch = 3e-6;
  // A row of the same shape, transposed (8192 x 1024 x 8192): 500 TFLOP/s,
  // not the smallest-dimension lookup's (the first row at 1024: 250).
  Op g = gemm(8192, 1024, 8192);
  EXPECT_NEAR(st::plan::op_seconds(g, c, 1), 2.0 * 8192 * 1024 * 8192 / 500e12 + launch, 1e-12);
  // No row of its shape: by its smallest dimension, 2048 between the rows
  // at 1024 (500) and 4096 (700): half way in log, 600.
  g = gemm(2048, 8192, 8192);
  EXPECT_NEAR(st::plan::op_seconds(g, c, 1), 2.0 * 2048 * 8192 * 8192 / 600e12 + launch, 1e-12);
  // An Add of n elements moves 3n bf16 elements (6n bytes): at 10 MB,
  // half way in log between the rows, 1250 GB/s.
  Op add;
  add.kind = OpKind::Add;
  add.s[0] = 10000000 / 6;
  const double bytes = 6.0 * double(add.s[0]);
  const double bw = 500e9 + std::log(bytes / 1e6) / std::log(100.0) * 1500e9;
  EXPECT_NEAR(st::plan::op_seconds(add, c, 1), bytes / bw + launch, 1e-12);
  // Causal attention over 4096 tokens: its row.
  const Op f = attn_op(OpKind::AttnFwd, 4096, 32, 8, 128, 1);
  const double causal = 4.0 * 32 * 128 * 4096.0 * 4096 / 2;
  EXPECT_NEAR(st::plan::op_seconds(f, c, 1), causal / 600e12 + launch, 1e-12);
  // A ring block of 4096 queries over 4096 keys (recorded as cp 2): half its
  // 4 x 32 x 128 x 4096^2 FLOPs, and with no full rows at the causal rows of
  // 4096: the same price as the causal call.
  const Op blk = attn_op(OpKind::AttnBwd, 4096, 32, 8, 128, 2);
  const auto p = st::plan::attention_price(blk, c);
  EXPECT_DOUBLE_EQ(p.flops, 2.5 * causal);
  EXPECT_EQ(p.block, "causal");
  EXPECT_NEAR(p.seconds, 2.5 * causal / 500e12, 1e-12);
  // With full rows, at the chunk length (2048): between 1024 and 4096 of them.
  std::string with_full = kRates;
  with_full.replace(with_full.find("  memory:"), 0,
                    "    - {head_dim: 128, seq: 1024, fwd_tflops: 450, bwd_tflops: 350, block: "
                    "full}\n    - {head_dim: 128, seq: 4096, fwd_tflops: 650, bwd_tflops: 550, "
                    "block: full}\n");
  const auto q = st::plan::attention_price(blk, st::plan::load_cluster(temp_file(with_full)));
  EXPECT_EQ(q.block, "full");
  EXPECT_DOUBLE_EQ(q.seq, 2048);
  EXPECT_NEAR(q.rate, 450e12, 1e3);  // half way in log
  EXPECT_NEAR(q.seconds, 2.5 * causal / 450e12, 1e-12);
  // The causal call keeps the causal rows beside full ones.
  EXPECT_EQ(st::plan::attention_price(f, st::plan::load_cluster(temp_file(with_full))).block,
            "causal");

  // A fitted profile: the old formula, fractions of the same rates; the
  // block priced for its whole pairs at the global length (4096 x 2).
  const Cluster slow = st::plan::with_profile(c, "slow");
  EXPECT_TRUE(slow.fitted());
  EXPECT_NEAR(st::plan::op_seconds(f, slow, 1), causal / (600e12 * 0.25) + 10e-6, 1e-12);
  EXPECT_NEAR(st::plan::attention_price(blk, slow).seconds, 2 * 2.5 * causal / (500e12 * 0.25),
              1e-12);
}

// Each file says how it is priced, and a rates-priced file carries what
// pricing by rates needs and no fractions; a profile that is not there is
// named with the ones that are.
TEST(PlanRates, PricingIsSaidAndChecked) {
  const std::string base = kRates;
  auto without = [&](const std::string& line) {
    std::string t = base;
    t.erase(t.find(line), line.size());
    return t;
  };
  std::string e = error(without("pricing: rates\n"));
  EXPECT_NE(e.find("missing key 'pricing'"), std::string::npos) << e;
  // A file from before the key, with its fitted fractions (calibrate-gpu's
  // output on the H200, committed with its study), loads as what it is.
  const Cluster old =
      st::plan::load_cluster(src() + "/results/gpu-check-h200-20261204/h200-141gb-calibrated.yaml");
  EXPECT_TRUE(old.fitted());
  EXPECT_EQ(old.pricing, "fitted");
  e = error(without("  launch_us: 3\n"));
  EXPECT_NE(e.find("pricing: rates needs rates.launch_us"), std::string::npos) << e;
  e =
      error(without("  memory:\n    - {bytes: 1000000, gbps: 500}\n    - {bytes: 100000000, "
                    "gbps: 2000}\n"));
  EXPECT_NE(e.find("rates.memory"), std::string::npos) << e;
  e = error(base + "efficiency: {gemm: 0.5}\n");
  EXPECT_NE(e.find("'efficiency' with pricing: rates"), std::string::npos) << e;
  std::string bad = base;
  bad.replace(bad.find("pricing: rates"), 14, "pricing: guessed");
  e = error(bad);
  EXPECT_NE(e.find("'pricing': 'guessed' is not one of rates|fitted"), std::string::npos) << e;
  bad = base;
  bad.replace(bad.find("slow: {gemm: 0.5"), 16, "slow: {gemm: 1.5");
  e = error(bad);
  EXPECT_NE(e.find("'profiles.slow.gemm': 1.5 is outside (0, 1]"), std::string::npos) << e;
  bad = base;
  bad.replace(bad.find("fwd_tflops: 400, bwd_tflops: 300}"), 33,
              "fwd_tflops: 400, bwd_tflops: 300, block: diagonal}");
  e = error(bad);
  EXPECT_NE(e.find("'rates.attention[0].block': 'diagonal' is not one of causal|full"),
            std::string::npos)
      << e;
  const Cluster c = st::plan::load_cluster(temp_file(base));
  try {
    (void)st::plan::with_profile(c, "mpt-fit");
    ADD_FAILURE() << "an unknown profile was accepted";
  } catch (const st::UsageError& x) {
    EXPECT_NE(std::string(x.what()).find("no profile 'mpt-fit' (its profiles: slow)"),
              std::string::npos)
        << x.what();
  }
  // The writer keeps pricing, profiles, memory, launch and block kinds.
  const Cluster back = st::plan::load_cluster(temp_file(st::plan::cluster_to_yaml(c)));
  EXPECT_EQ(back.pricing, "rates");
  EXPECT_EQ(back.profiles.count("slow"), 1u);
  EXPECT_DOUBLE_EQ(back.profiles.at("slow").attention, 0.25);
  EXPECT_EQ(back.rates.memory.size(), 2u);
  EXPECT_DOUBLE_EQ(back.rates.launch, 3e-6);
}

}  // namespace
