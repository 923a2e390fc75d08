// The pipeline bubble the step-time replay predicts, held to the schedule's
// own count, and what moving data parallelism across nodes may cost. On the
// shipped H100 cluster file with Llama-2-70B's layer widths (tp 8 + sp,
// full recomputation, micro-batch 1; fewer layers, so every stage holds 2
// or 4 of them and the test stays fast): the critical stage's idle time in
// the pipeline is the schedule's bubble, (p-1)/m of its ops' time (compute
// and the tp collectives they block on) under 1F1B and (p-1)/(v m)
// interleaved with v chunks, within 10%; the first and last
// stages' extra work (embedding; head and loss) is its own part. The
// expectations are the schedules' textbook counts, never read back from the
// replay.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/cluster.hpp"
#include "plan/time_model.hpp"

namespace {
using st::Config;
using st::plan::StepPrediction;

std::string src() {
  const char* s = std::getenv("SCALETRAIN_SOURCE_DIR");
  return s ? s : ".";
}

st::plan::Cluster h100(int devices_per_node) {
  st::plan::Cluster c = st::plan::load_cluster(src() + "/configs/clusters/h100-sxm-80gb.yaml");
  c.devices_per_node = devices_per_node;
  return c;
}

// Llama-2-70B's widths (d_model 8192, 64 heads / 8 kv, ffn 28672, vocab
// 32000) at seq 4096 with `layers` layers, laid out as the planner lays a
// GPU cluster out (bf16 on cuda).
Config llama70b_widths(int layers, int pp, int chunks, int micro, int dp, int zero) {
  Config c = st::load_config(
      "",
      {"model.preset=llama-70b", "model.n_layers=" + std::to_string(layers), "model.seq_len=4096",
       "runtime.device=cuda", "train.precision=bf16", "train.act_ckpt=full", "train.micro_batch=1",
       "parallel.tp=8", "parallel.sp=true", "parallel.pp=" + std::to_string(pp),
       "parallel.num_model_chunks=" + std::to_string(chunks), "parallel.dp=" + std::to_string(dp),
       "parallel.zero_stage=" + std::to_string(zero), "train.grad_accum=" + std::to_string(micro)});
  st::validate_config(c);
  return c;
}

struct Point {
  int pp, chunks, micro;
};

TEST(PlanBubble, BalancedPipelinePaysTheSchedulesOwnBubble) {
  // 2 layers per stage and chunk, pp 2 to 16, 16 to 64 micro-batches.
  const std::vector<Point> points = {{2, 1, 16}, {4, 1, 16},  {8, 1, 16}, {16, 1, 16},
                                     {4, 1, 64}, {16, 1, 32}, {4, 2, 16}, {8, 2, 32}};
  for (const Point& q : points) {
    const Config c = llama70b_widths(2 * q.pp * q.chunks, q.pp, q.chunks, q.micro, 1, 1);
    const StepPrediction t = st::plan::predict_step(c, h100(8));
    // One micro-batch's forward and backward on a stage: its compute and
    // the tp collectives it blocks on (sequence parallelism's gathers and
    // reduce-scatters run inline on the compute stream), m of them a step.
    const double ops =
        t.compute() + t.part(st::CommPart::Tp).exposed + t.part(st::CommPart::Cp).exposed;
    const double want = double(q.pp - 1) / double(q.chunks * q.micro) * ops;
    EXPECT_NEAR(t.bubble, want, 0.10 * want)
        << "pp " << q.pp << " x " << q.chunks << " chunks x " << q.micro
        << " micro-batches: bubble / (compute + tp) " << t.bubble / ops << ", schedule "
        << want / ops << "; bubble / compute " << t.bubble / t.compute() << "; imbalance / compute "
        << t.imbalance / t.compute();
    // The head and loss on the last stage make it the slowest: its extra
    // work is the imbalance, apart from the bubble.
    EXPECT_GT(t.imbalance, 0);
    // The critical stage is computing, waiting for a message, idle in the
    // bubble or the imbalance, or in the optimizer.
    EXPECT_NEAR(t.step, t.compute() + t.optimizer + t.bubble + t.imbalance + t.exposed_comm(),
                0.01 * t.step);
  }
}

TEST(PlanBubble, DataParallelAcrossNodesCostsOnlyItsCollectives) {
  // 1F1B pp 4 x 16 micro-batches, ZeRO 1, dp 2: the dp peers on the same
  // node (one node holds the whole job), then on two nodes (8 devices a
  // node: tp inside, dp and pp across). The step may grow by what the
  // dp gradient reductions and the ZeRO gathers add to their exposed time,
  // not more: the pipeline's own idle time stays.
  const Config c = llama70b_widths(16, 4, 1, 16, 2, 1);
  const StepPrediction in = st::plan::predict_step(c, h100(4096));
  const StepPrediction across = st::plan::predict_step(c, h100(8));
  EXPECT_GT(across.part(st::CommPart::Dp).total,
            in.part(st::CommPart::Dp).total);  // the inter-node link is slower
  const double exposed_in = in.part(st::CommPart::Dp).exposed + in.part(st::CommPart::Zero).exposed;
  const double exposed_across =
      across.part(st::CommPart::Dp).exposed + across.part(st::CommPart::Zero).exposed;
  EXPECT_LE(across.step - in.step, exposed_across - exposed_in + 0.01 * in.step)
      << "step " << in.step << " -> " << across.step << " s; dp + ZeRO exposed " << exposed_in
      << " -> " << exposed_across << " s; bubble " << in.bubble << " -> " << across.bubble << " s";
  EXPECT_NEAR(across.bubble + across.imbalance, in.bubble + in.imbalance, 0.01 * in.step);
}

}  // namespace
