// What one kernel call and one collective cost on a cluster: the rates the
// step-time model (time_model.hpp) adds up. CPU clusters: calibrate's measured
// op times and collective fits; GPU clusters: a roofline and alpha-beta ring
// costs from the cluster file's figures (docs/planner.md).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "plan/cluster.hpp"
#include "plan/ops.hpp"

namespace st::plan {

// Slowdown of one rank's compute while `ranks` ranks of a node compute at
// once (a CPU cluster's measured `concurrency`, linear between measured
// counts, proportional beyond; 1 without the table or for one rank).
double concurrency_slowdown(const Cluster& cl, int ranks);
// One node under a CPU quota (Cluster::cpu_quota): what its ranks' compute
// receives when they idle part of each period. Group g (a pipeline stage's
// ranks on the node, computing in step) has ranks[g] ranks, each busy over
// busy[g]: sorted, disjoint wall intervals within one step of `step`
// seconds. The step repeats back to back and the quota's periods fall at
// every phase against it: the node's ranks together get cpus x period of
// CPU time per period and none once it is spent until the next one. A busy
// rank runs `threads` threads, the node has `cores` (0: as many as asked);
// with `a` ranks busy their CPU time does 1 / extra(a) of its work alone
// (what sharing the cores costs beyond the quota; empty: 1). Per group:
// the CPU seconds of work one of its ranks gets done over its intervals in
// a step (the first repeat, which starts with a full quota, left out).
struct QuotaNode {
  double cpus = 0, period = 0.1;
  int cores = 0, threads = 1;
  std::function<double(int)> extra;
};
std::vector<double> quota_cpu_seconds(
    const std::vector<std::vector<std::pair<double, double>>>& busy, const std::vector<int>& ranks,
    double step, const QuotaNode& node);
// CPUs of each of `a` ranks computing at once on a node at the quota.
double quota_share(const QuotaNode& q, int a);

// The same quota followed through a step, for ranks computing in step on a
// node that holds no others (a pipeline stage's dp peers, a dp-only run's
// rank): each compute run's end from the budget the node has left when it
// starts. In the mean over the periods' phases against the step, the budget
// is a bucket of one period's worth (cpus x period) refilled at `cpus` CPUs
// (a stretch of t seconds holds t / period period starts on average): a run
// spends it at the node's full draw, then goes at the quota's rate; idle
// time fills it again. The emulated cluster's traces show what this gives:
// a stage that computes in bursts between pipeline waits gets about 0.32
// CPU a rank over them where one that computes back to back gets 0.25
// (docs/planner.md, Validation 6). Runs must come in time order.
struct QuotaClock {
  int ranks = 0;         // 0: no clock (the stage's kernels take their price)
  double cpus = 0;       // the quota's refill, CPUs
  double cap = 0;        // the bucket: one period's budget, CPU seconds
  double draw = 0;       // the node's CPUs while its ranks compute, budget left
  double fast = 0;       // CPU seconds of one rank's alone-work a second, budget left
  double slow = 0;       // the same at the quota's rate (bucket empty)
  double per_price = 1;  // work (alone CPU seconds) per priced second
  double tokens = 0, last = 0;
  // Where a run priced at `priced` seconds that starts at t ends.
  double run(double t, double priced);
};
// The clock of `ranks` ranks computing in step on a node of quota q, whose
// kernels were priced at `per_price` alone CPU seconds per second (the
// quota's sustained rate of one rank over the slowdown the price assumed),
// with `tokens` CPU seconds in the bucket at time 0.
QuotaClock quota_clock(const QuotaNode& q, int ranks, double per_price, double tokens);

// One kernel call on one rank, with `ranks_on_node` ranks sharing the node
// (priced at their concurrency_slowdown). A GPU cluster with pricing:
// rates prices the `rates` tables as measured plus rates.launch_us per
// call; pricing: fitted, the rates (or peaks) times the fitted fractions.
double op_seconds(const Op& op, const Cluster& cl, int ranks_on_node);
// What an attention call (AttnFwd / AttnBwd) costs on a GPU cluster before
// its launch: the FLOPs priced (pricing rates: the pairs the kernel
// computes, half of a ring block's; fitted: Op::flops), the rate and which
// rows it came from (block kind, sequence length), and flops / rate.
struct AttnPrice {
  double flops = 0, rate = 0, seconds = 0;
  std::string block = "causal";
  double seq = 0;
};
AttnPrice attention_price(const Op& op, const Cluster& cl);
// What a collective is priced as: its kind (the seam's row: ring factors,
// communicator.hpp) and, for an exchange, whether it is the cp ring's shift
// (send to the next, receive from the previous: Axis::Cp) or a pipeline
// message (p2p).
struct CollPrice {
  CollKind kind = CollKind::AllReduce;
  bool ring_shift = false;
  // The cluster file's name of it (its measured `collectives`): all_reduce,
  // reduce_scatter, all_gather, broadcast, ring_shift, p2p.
  const char* name() const;
  bool operator==(const CollPrice& o) const { return kind == o.kind && ring_shift == o.ring_shift; }
};
CollPrice coll_price(CollKind kind, Axis axis);

// One collective of `bytes` (nccl-tests' size: the whole buffer) over a group
// of `ranks`; `inter` when the group spans nodes, `per_node` of its ranks
// sharing each node. A ring collective across nodes runs one ring per NIC
// (NCCL channels), so its bandwidth is that of the group's NICs on a node
// together (per_node x the per-device inter-node figure), capped by the
// links inside the node. `node_ranks`: the ranks on a node issuing the same
// collective at once, in this group or another (0: unsaid); with per_node it
// picks the measured collective of the nearest shape (MeasuredCollective).
double collective_seconds(CollPrice kind, double bytes, int ranks, bool inter, const Cluster& cl,
                          int per_node = 1, int node_ranks = 0);

}  // namespace st::plan
