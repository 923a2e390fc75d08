// The memory and step-time models on small cases worked out by hand, and the
// cluster file's checks. Each expectation is arithmetic written out here
// from the shapes, not read back from the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "plan/cluster.hpp"
#include "plan/layout.hpp"
#include "plan/memory.hpp"
#include "plan/ops.hpp"
#include "plan/time_model.hpp"

namespace {
using st::Config;
using st::plan::Cluster;

Config model(const std::vector<std::string>& sets) {
  std::vector<std::string> s = {"model.preset=default", "model.seq_len=128"};
  s.insert(s.end(), sets.begin(), sets.end());
  Config c = st::load_config("", s);
  if (c.parallel.dp == 0) c.parallel.dp = 1;
  return c;
}

// A CPU cluster where every kernel call of cfg costs exactly `op_s`, ranks
// do not slow each other, and collectives cost latency + bytes / bandwidth.
Cluster unit_cluster(const std::vector<Config>& cfgs, double op_s, double lat, double bw) {
  Cluster c;
  c.path = "(test)";
  c.name = "unit";
  c.kind = "cpu";
  c.peak_flops = 1e12;
  c.memory_bytes = 1e12;
  c.devices_per_node = 64;
  for (const Config& cfg : cfgs) {
    const st::plan::MicroOps mo = st::plan::micro_ops(cfg);
    for (auto* v : {&mo.block_fwd, &mo.block_bwd, &mo.block_recompute, &mo.embed_fwd, &mo.embed_bwd,
                    &mo.head_fwd, &mo.head_bwd})
      for (const auto& op : *v)  // tensor allocations cost nothing here
        c.op_seconds[op.key()] = op.kind == st::plan::OpKind::Alloc ? 0 : op_s;
  }
  // The step's end (AdamW, the norm's squares, bucket copies) costs nothing here.
  for (const Config& cfg : cfgs)
    for (int st = 0; st < cfg.parallel.pp; ++st)
      for (const auto& op : st::plan::step_end_ops(cfg, st::plan::stage_shape(cfg, st).params))
        c.op_seconds[op.key()] = 0;
  for (const char* k : {"all_reduce", "reduce_scatter", "all_gather", "ring_shift", "p2p"})
    for (int n : {2, 4, 8}) c.collectives.push_back({k, n, {bw, lat}});
  return c;
}

TEST(PlanMemory, SingleRankPeakIsTheHeadBackward) {
  // default preset at seq 128, micro-batch 4, one rank, fp32: the peak is
  // the head's backward with every block's activations kept.
  const Config c = model({"train.micro_batch=4"});
  const double N = 4 * 128, d = 512, F = 1152, V = 256, kd = 2 * 64, H = 8;
  const double block = N * d /*x*/ + N /*rstd1*/ + N * d /*xn1*/ + N * d /*q*/ + 2 * N * kd +
                       N * d /*att*/ + N * H /*lse*/ + N * d /*h2*/ + N /*rstd2*/ + N * d /*xn2*/ +
                       3 * N * F;
  const double head = N * d /*hL*/ + N /*rstd*/ + N * d /*xn*/ + N * V /*logits*/ + N * d /*dxn*/;
  const double P = 2 * V * d + 8 * (2 * d + 2 * d * d + 2 * d * kd + 3 * d * F) + d;
  const st::plan::MemoryEstimate e = st::plan::estimate_memory(c, 0);
  EXPECT_EQ(e.peak_at, "head backward");
  EXPECT_DOUBLE_EQ(e.peak.activations, 4 * (8 * block + head));
  EXPECT_DOUBLE_EQ(e.peak.weights, 4 * P);
  EXPECT_DOUBLE_EQ(e.peak.grads, 4 * P);
  EXPECT_DOUBLE_EQ(e.peak.optim, 8 * P);
  EXPECT_DOUBLE_EQ(e.peak.buffers, 0);  // buckets reduce the gradient buffer in place
  EXPECT_DOUBLE_EQ(e.untracked, 0);
}

TEST(PlanMemory, ZeroStagesShardOverDataParallel) {
  // dp 4, fp32: moments shard from ZeRO 1; ZeRO 2 keeps its gradient shard
  // and, during backward, a pool of bucket staging buffers (never the whole
  // buffer), so its peak is below ZeRO 1's; with parallel.zero_full_grads it
  // allocates the whole buffer per step again (ZeRO 1's peak plus the
  // shard); ZeRO 3 shards the weights too.
  double total[4], grads[4], P = 0;
  for (int z = 0; z <= 3; ++z) {
    const Config c =
        model({"parallel.dp=4", "parallel.zero_stage=" + std::to_string(z), "train.micro_batch=1"});
    const auto e = st::plan::estimate_memory(c, 0);
    P = double(e.shape.params);
    EXPECT_DOUBLE_EQ(e.peak.optim, z >= 1 ? 8 * P / 4 : 8 * P) << z;
    total[z] = e.peak.total();
    grads[z] = e.peak.grads;
  }
  EXPECT_DOUBLE_EQ(total[0] - total[1], 8 * P - 8 * P / 4);
  EXPECT_DOUBLE_EQ(grads[1], 4 * P);
  EXPECT_GT(grads[2], 4 * P / 4);  // the shard and some staging
  EXPECT_LT(grads[2], 4 * P / 2);  // two layers and the head, not the buffer
  EXPECT_LT(total[2], total[1]);
  EXPECT_LT(total[3], total[2]);
  const auto full = st::plan::estimate_memory(
      model({"parallel.dp=4", "parallel.zero_stage=2", "train.micro_batch=1",
             "parallel.zero_full_grads=true"}),
      0);
  EXPECT_DOUBLE_EQ(full.peak.total() - total[1], 4 * P / 4);
}

TEST(PlanMemory, OneFOneBKeepsPpMinusStageMicroBatches) {
  // pp 4, grad_accum 8, micro-batch 1: stage s keeps pp - s micro-batches of
  // its 2 blocks, so stage 0 keeps 2 more than stage 2: 2 x 2 blocks.
  const Config c = model({"parallel.pp=4", "train.grad_accum=8", "train.micro_batch=1"});
  const double N = 128, d = 512, F = 1152, kd = 128, H = 8;
  const double block =
      N * d + N + N * d + N * d + 2 * N * kd + N * d + N * H + N * d + N + N * d + 3 * N * F;
  const auto s0 = st::plan::estimate_memory(c, 0), s2 = st::plan::estimate_memory(c, 2);
  EXPECT_DOUBLE_EQ(s0.activations_max, 4 * (4 * 2 * block + N * d));  // + the incoming gradient
  EXPECT_DOUBLE_EQ(s0.activations_max - s2.activations_max, 4 * (2 * 2 * block));
  // The pipeline's boundary sends are kept to the step's end: buffers.
  EXPECT_GT(s0.peak.buffers, 0);
  EXPECT_DOUBLE_EQ(s0.untracked, 0);
}

TEST(PlanTime, OneRankIsTheSumOfItsKernelCalls) {
  // 15 calls per block forward, 20 per block backward (tp 1, no
  // checkpointing); embedding 1 + 1; head 3 + 4. 8 blocks, 3 micro-batches,
  // 1 ms per call: 3 x (8*15 + 1 + 3 + 8*20 + 1 + 4) ms = 867 ms.
  const Config c = model({"train.micro_batch=1", "train.grad_accum=3"});
  const Cluster cl = unit_cluster({c}, 1e-3, 0, 1e18);
  const auto t = st::plan::predict_step(c, cl);
  EXPECT_NEAR(t.compute(), 0.867, 1e-9);
  EXPECT_NEAR(t.step, 0.867, 1e-9);  // optimizer and reductions cost nothing here
  EXPECT_NEAR(t.bubble, 0, 1e-12);
  EXPECT_NEAR(t.tokens_per_s, 3 * 128 / t.step, 1e-9);
}

TEST(PlanTime, OneFOneBBubbleWorkedByHand) {
  // pp 2, 4 micro-batches, 1 ms per call. Stage 0: forward 4*15+1 = 61,
  // backward 4*20+1 = 81; stage 1: forward 4*15+3 = 63, backward 4*20+4 = 84.
  // Walking 1F1B by hand (s0: F0 F1 B0 F2 B1 F3 B2 B3; s1: F0 B0 F1 B1 ...)
  // stage 0 ends at 730 ms after 4*61 + 4*81 = 568 ms of work: 162 ms idle.
  const Config c = model({"parallel.pp=2", "train.micro_batch=1", "train.grad_accum=4"});
  const Cluster cl = unit_cluster({c}, 1e-3, 0, 1e18);
  const auto t = st::plan::predict_step(c, cl);
  EXPECT_NEAR(t.step, 0.730, 1e-6);
  EXPECT_NEAR(t.bubble, 0.162, 1e-6);
  EXPECT_NEAR(t.compute(), 0.568, 1e-9);
  // Interleaving 2 chunks shortens the bubble.
  const Config v2 = model({"parallel.pp=2", "parallel.num_model_chunks=2", "train.micro_batch=1",
                           "train.grad_accum=4"});
  const auto t2 = st::plan::predict_step(v2, unit_cluster({v2}, 1e-3, 0, 1e18));
  EXPECT_LT(t2.bubble, t.bubble);
  EXPECT_NEAR(t2.compute(), t.compute(), 1e-9);
}

TEST(PlanTime, TensorParallelCollectivesCountedPerBlock) {
  // tp 2 without sp: per block 2 all-reduces of [N, d] forward and 2 in
  // backward; the embedding 1, the head 1 plus its two cross-entropy
  // reductions (N doubles, 2N doubles). Latency 1 ms, bandwidth 1e18.
  const Config c = model({"parallel.tp=2", "train.micro_batch=1"});
  const Cluster cl = unit_cluster({c}, 1e-3, 1e-3, 1e18);
  const auto t = st::plan::predict_step(c, cl);
  EXPECT_NEAR(t.tp.total, (8 * 4 + 1 + 1 + 2) * 1e-3, 1e-9);
  EXPECT_NEAR(t.tp.exposed, t.tp.total, 1e-12);
}

TEST(PlanTime, LastBucketIsExposed) {
  // dp 2, one bucket holding every gradient: it can start only when the
  // embedding's gradient is ready, the end of backward, so its whole
  // all-reduce (4 P bytes at 1 GB/s) is exposed.
  const Config c = model({"parallel.dp=2", "parallel.dp_bucket_mb=1000", "train.micro_batch=1"});
  const Cluster cl = unit_cluster({c}, 1e-3, 0, 1e9);
  const auto t = st::plan::predict_step(c, cl);
  const double P = double(st::plan::stage_shape(c, 0).params);
  EXPECT_NEAR(t.dp.total, 4 * P / 1e9, 1e-9);
  EXPECT_NEAR(t.dp.exposed, 4 * P / 1e9, 1e-9);
}

TEST(PlanTime, RingCollectivesOnGpuLinks) {
  Cluster g;
  g.kind = "gpu";
  g.devices_per_node = 8;
  g.intra = {400e9, 2e-6};
  g.inter = {50e9, 10e-6};
  g.eff.network = 0.5;
  const double B = 1e9;
  // all-reduce over 8 inside a node: 2*7/8 B / (400e9*0.5) + 2*7 * 2 us.
  EXPECT_NEAR(st::plan::collective_seconds("all_reduce", B, 8, false, g),
              2.0 * 7 / 8 * B / 200e9 + 14 * 2e-6, 1e-12);
  // all-gather over 16 on 2 nodes, 8 per node: the node's 8 NICs together
  // (8 * 50 GB/s = 400 GB/s, no more than NVLink), inter-node latency.
  EXPECT_NEAR(st::plan::collective_seconds("all_gather", B, 16, true, g, 8),
              15.0 / 16 * B / (400e9 * 0.5) + 15 * 10e-6, 1e-12);
  // One rank per node: one NIC.
  EXPECT_NEAR(st::plan::collective_seconds("reduce_scatter", B, 4, true, g, 1),
              3.0 / 4 * B / (50e9 * 0.5) + 3 * 10e-6, 1e-12);
  EXPECT_EQ(st::plan::collective_seconds("all_reduce", B, 1, false, g), 0);
}

// Cluster files: every error names the file, the key and what is valid.
class ClusterFile : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() /
             ("st_cluster_" + std::to_string(::getpid()) + ".yaml"))
                .string();
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string error(const std::string& text) {
    try {
      st::plan::load_cluster(write(text));
    } catch (const st::UsageError& e) {
      return e.what();
    }
    return "";
  }
  std::string path_;
};

const char* kGood =
    "name: g\ndevice: H100 SXM\nmemory_gib: 80\nmemory_bandwidth_gbps: 3350\n"
    "devices_per_node: 8\nintra_node: {bandwidth_gbps: 450, latency_us: 3}\n";

TEST_F(ClusterFile, ReadsAGoodFileAndTheTablePeak) {
  const Cluster c = st::plan::load_cluster(write(kGood));
  EXPECT_DOUBLE_EQ(c.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(c.inter.bandwidth, 450e9);  // no inter_node: the intra link
  EXPECT_EQ(c.devices_per_node, 8);
  // Round trip through the writer.
  const Cluster d = st::plan::load_cluster(write(st::plan::cluster_to_yaml(c)));
  EXPECT_DOUBLE_EQ(d.peak_flops, c.peak_flops);
  EXPECT_DOUBLE_EQ(d.memory_bytes, c.memory_bytes);
}

TEST_F(ClusterFile, RefusesBadInputNamingKeyAndValidValues) {
  std::string e = error(std::string(kGood) + "memory_gbi: 3\n");
  EXPECT_NE(e.find("unknown key 'memory_gbi'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'memory_gib'"), std::string::npos) << e;
  EXPECT_NE(e.find(":7"), std::string::npos) << "line number: " << e;
  e = error(std::string(kGood) + "efficiency: {gemm: 1.5}\n");
  EXPECT_NE(e.find("'efficiency.gemm': 1.5 is outside (0, 1]"), std::string::npos) << e;
  e = error(std::string(kGood) + "kind: tpu\n");
  EXPECT_NE(e.find("'kind': 'tpu' is not one of gpu|cpu"), std::string::npos) << e;
  e = error(
      "name: g\ndevice: Mystery 9000\nmemory_gib: 8\nmemory_bandwidth_gbps: 1\n"
      "devices_per_node: 1\nintra_node: {bandwidth_gbps: 1, latency_us: 1}\n");
  EXPECT_NE(e.find("add peak_tflops"), std::string::npos) << e;
  e = error("name: g\ndevice: H100 SXM\nmemory_gib: 80\n");
  EXPECT_NE(e.find("missing key"), std::string::npos) << e;
  e = error(std::string(kGood) + "memory_reserved_gib: 90\n");
  EXPECT_NE(e.find("memory_reserved_gib must be below memory_gib"), std::string::npos) << e;
  std::string bad = kGood;
  bad.replace(bad.find("devices_per_node: 8"), 19, "devices_per_node: many");
  e = error(bad);
  EXPECT_NE(e.find("'devices_per_node': expected a number in [1, "), std::string::npos) << e;
  e = error(
      "name: c\ndevice: cpu\nkind: cpu\npeak_tflops: 0.1\nmemory_gib: 4\ndevices_per_node: 2\n"
      "cores_per_node: 2\nintra_node: {bandwidth_gbps: 1, latency_us: 1}\n");
  EXPECT_NE(e.find("needs measured 'ops'"), std::string::npos) << e;
  bad = kGood;
  bad.replace(bad.find("bandwidth_gbps: 450"), 19, "bandwidth_gbps: -4");
  e = error(bad);
  EXPECT_NE(e.find("'intra_node.bandwidth_gbps': -4 is outside (0, "), std::string::npos) << e;
}

}  // namespace
