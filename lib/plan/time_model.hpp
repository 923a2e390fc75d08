// The step-time model: one training step of cfg's layout on a cluster, split
// into compute (GEMMs, attention, elementwise, recomputation), the pipeline
// bubble and the first and last stages' imbalance, communication per group
// (total and exposed: dp gradient buckets overlapped with backward, tp/sp
// collectives and the cp ring inline, pp messages, ZeRO parameter gathers,
// the loss and norm reductions) and the optimizer; then tokens/s, MFU and
// HFU by scaletrain-analyze's formulas.
//
// Compute prices every kernel call of ops.hpp: on a CPU cluster the time
// calibrate measured for that call (times the slowdown of the ranks sharing
// the node's cores), on a GPU cluster a roofline with the cluster's
// efficiencies. Collectives: calibrate's measured fits on a CPU cluster;
// ring (all-reduce, reduce-scatter, all-gather) and point-to-point alpha-beta
// costs over the link the group spans (inside a node or between nodes) on a
// GPU cluster. The pipeline is simulated op by op over all stages, so the
// bubble of 1F1B and interleaved schedules comes out of the dependencies.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/step_parts.hpp"
#include "plan/cluster.hpp"
#include "plan/ops.hpp"
#include "plan/rates.hpp"

namespace st::plan {

struct CommTime {
  double total = 0;    // seconds per step the part's collectives take
  double exposed = 0;  // seconds per step the step waits for them
};

struct StepPrediction {
  // Compute on the critical stage per step (all micro-batches).
  double gemm = 0, attention = 0, elementwise = 0;
  double recompute = 0;  // share of the three above spent recomputing (act_ckpt)
  // The attention FLOPs the critical stage's calls were priced for
  // (attention_price: pairs computed, recomputation included): with
  // `attention`, the rate its attention ran at.
  double attention_flops = 0;
  // The critical stage's idle time in pipeline receives (beyond the
  // messages themselves): bubble is the schedule's own (its idle when every
  // stage's ops take as long as its own and none carries embedding, head or
  // loss), imbalance what the stages' unequal work adds to it (the first
  // and last stages' embedding, head and loss; an uneven layer split).
  double bubble = 0, imbalance = 0;
  // Collectives by part of the step (core/step_parts.hpp; zero: ZeRO's
  // parameter gathers, other: the loss, norm and other host scalars).
  std::array<CommTime, kCommParts> comm{};
  const CommTime& part(CommPart p) const { return comm[ix(p)]; }
  CommTime& part(CommPart p) { return comm[ix(p)]; }
  double optimizer = 0;
  double step = 0;
  int devices = 0;
  double tokens_per_step = 0, tokens_per_s = 0, tokens_per_s_device = 0;
  double mfu = 0, hfu = 0;  // fractions (0..1)
  // Per pipeline stage: the step less that stage's own compute and
  // optimizer, the time its ranks wait (pipeline receives, exposed
  // collectives, the step's end). What a run's telemetry measures per rank
  // as step - fwd - bwd - optim, so a stage is set against its own ranks.
  std::vector<double> stage_waits;
  double compute() const { return gemm + attention + elementwise; }
  double exposed_comm() const {
    double s = 0;
    for (const CommTime& c : comm) s += c.exposed;
    return s;
  }
  // The step by part (core/step_parts.hpp), as a run's telemetry splits it:
  // compute (GEMMs, attention, elementwise), the optimizer, comm (exposed
  // collectives, the bubble and the imbalance: a run waits them out in
  // pipeline receives), other (what those leave of the step); data and the
  // checkpoint stall are not modelled (0). They add up to `step`.
  StepParts parts() const;
};

// cfg must be resolved and valid. Throws UsageError when a CPU cluster file
// lacks a measurement the layout needs and nothing close can stand in.
StepPrediction predict_step(const Config& cfg, const Cluster& cl);

}  // namespace st::plan
