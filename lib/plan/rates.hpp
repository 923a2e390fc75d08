// What one kernel call and one collective cost on a cluster: the rates the
// step-time model (time_model.hpp) adds up. CPU clusters: calibrate's measured
// op times and collective fits; GPU clusters: a roofline and alpha-beta ring
// costs from the cluster file's figures (docs/planner.md).
#pragma once
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
