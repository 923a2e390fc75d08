// How the nodes' CPUs are shared by the stages predict_step replays
// (step_time.cpp): ranks of different pipeline stages on one node take
// turns on its cores (a CPU cluster's `concurrency`), and under a cgroup
// CPU quota on each node (Cluster::host.quota, quota.hpp) ranks that idle
// part of a period spend the rest of it faster. Both repeat the replay with
// each stage's kernels at the rate its intervals receive until it settles;
// a stage alone on its nodes under a quota is followed through the step by
// its node's clock instead. Internal to lib/plan.
#pragma once
#include <vector>

#include "config/config.hpp"
#include "plan/cluster.hpp"
#include "plan/replay.hpp"

namespace st::plan {

// The ranks a kernel price assumes share the node: all of a node's, or
// the whole layout's when it is smaller (op_seconds' concurrency).
int priced_ranks_on_node(const Config& cfg, const Cluster& cl);

class NodeShare {
 public:
  // Sets opt.busy (the replay keeps each stage's compute intervals) where
  // stages share a node or a quota caps them, and opt.quota (per stage, its
  // node's clock) under a quota.
  NodeShare(const Config& cfg, const Cluster& cl, ReplayOpts& opt);
  // rp, replayed from `priced` with opt: replayed again at the rate the
  // stages' turns and idle give (opt.cscale) until it settles; halfway
  // steps, as the turns move with it. A clock starts the next replay with
  // the bucket the step's end left it.
  void settle(const std::vector<Priced>& priced, const std::vector<int>& stand_in,
              const std::vector<int>& slot, ReplayOpts& opt, std::vector<Replay>& rp) const;

 private:
  const Config& cfg_;
  const Cluster& cl_;
  bool quota_;
  std::vector<std::vector<int>> cnt_;  // cnt_[node][stage]: ranks
  std::vector<int> alone_ranks_;       // per stage, ranks alone on a node under a quota (0: shares)
};

}  // namespace st::plan
