// The arithmetic of a cgroup CPU quota on a node (Cluster::host.quota,
// core/host.hpp: a container's CPU limit, an emulated node) as the replay
// prices it: what compute that idles part of each period receives, and the
// quota's budget followed through a step. node_share.hpp applies it to the
// replayed stages.
#pragma once
#include <functional>
#include <utility>
#include <vector>

namespace st::plan {

// One node under a CPU quota (Cluster::host.quota): what its ranks' compute
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

}  // namespace st::plan
