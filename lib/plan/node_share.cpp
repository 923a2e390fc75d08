// Implementation of node_share.hpp: the nodes' CPUs shared by the replayed
// stages, by their turns and under a CPU quota.
#include "plan/node_share.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "parallel/mesh.hpp"

namespace st::plan {

// The ranks a kernel price assumes share the node: all of a node's, or
// the whole layout's when it is smaller (op_seconds' concurrency).
int priced_ranks_on_node(const Config& cfg, const Cluster& cl) {
  const auto& p = cfg.parallel;
  return std::min(p.dp * p.tp * p.pp * p.cp, cl.devices_per_node);
}

namespace {
// The ranks of each pipeline stage on each node (the cluster's placement,
// Cluster::node_of), each rank's stage from the mesh's own order (mesh_coords).
// cnt[n][s].
std::vector<std::vector<int>> node_stages(const Config& cfg, const Cluster& cl) {
  const auto& p = cfg.parallel;
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  const int world = d.world();
  std::vector<std::vector<int>> cnt;
  for (int r = 0; r < world; ++r) {
    const size_t n = size_t(cl.node_of(r, world));
    if (cnt.size() <= n) cnt.resize(n + 1, std::vector<int>(size_t(p.pp)));
    ++cnt[n][size_t(mesh_coords(r, d).pp)];
  }
  return cnt;
}

// Whether some node holds ranks of two stages and the cluster slows ranks
// that compute at once (a CPU cluster's `concurrency`).
bool stages_share_nodes(const std::vector<std::vector<int>>& cnt, const Cluster& cl) {
  if (cl.concurrency.empty()) return false;
  for (const auto& n : cnt)
    if (std::count_if(n.begin(), n.end(), [](int k) { return k > 0; }) > 1) return true;
  return false;
}

// The pipeline's stages take turns: ranks of different stages on one node
// compute at once only part of the time, while op_seconds priced every
// kernel at the slowdown of all the node's ranks computing at once. For
// each stage, the slowdown its ranks see over their compute intervals of
// replay rp (its own stage's ranks on the node in step with it, the other
// stages' ranks while those compute), as a factor on that price: the work
// done at rate 1/slowdown(k(t)) over the intervals, T / sum(dt / slowdown).
// The largest over the stage's nodes.
std::vector<double> node_sharing(const Config& cfg, const Cluster& cl,
                                 const std::vector<std::vector<int>>& cnt,
                                 const std::vector<Replay>& rp) {
  const int P = cfg.parallel.pp;
  const double priced = concurrency_slowdown(cl, priced_ranks_on_node(cfg, cl));
  std::vector<double> f(size_t(P), 0.0);
  for (const auto& node : cnt) {
    // Breakpoints of the number of other stages' ranks computing.
    for (int s = 0; s < P; ++s) {
      if (node[size_t(s)] == 0) continue;
      std::vector<std::pair<double, int>> ev;
      for (int o = 0; o < P; ++o)
        if (o != s && node[size_t(o)] > 0)
          for (const auto& [b, e] : rp[size_t(o)].busy) {
            ev.push_back({b, node[size_t(o)]});
            ev.push_back({e, -node[size_t(o)]});
          }
      std::sort(ev.begin(), ev.end());
      double T = 0, W = 0;
      size_t k = 0;
      int others = 0;
      for (const auto& [b, e] : rp[size_t(s)].busy) {
        double t = b;
        while (k < ev.size() && ev[k].first <= t) others += ev[k++].second;
        while (t < e) {
          const double next = k < ev.size() ? std::min(e, ev[k].first) : e;
          T += next - t;
          W += (next - t) / concurrency_slowdown(cl, node[size_t(s)] + others);
          t = next;
          while (k < ev.size() && ev[k].first <= t) others += ev[k++].second;
        }
      }
      const double eff = W > 0 ? T / W : concurrency_slowdown(cl, node[size_t(s)]);
      f[size_t(s)] = std::max(f[size_t(s)], eff / priced);
    }
  }
  return f;
}

// A node of cluster cl under its CPU quota, as quota_cpu_seconds and
// quota_clock take it: the measured concurrency's slowdown beyond the
// quota's share is what sharing the cores costs on top of the quota.
QuotaNode quota_node(const Cluster& cl) {
  QuotaNode q;
  q.cpus = cl.host.quota.cpus;
  q.period = cl.host.quota.period;
  q.cores = cl.host.cores;
  q.threads = cl.host.threads;
  const QuotaNode numbers = q;
  const double alone = quota_share(q, 1);
  q.extra = [&cl, numbers, alone](int a) {
    return std::max(1.0, concurrency_slowdown(cl, a) * quota_share(numbers, a) / alone);
  };
  return q;
}

// Under a CPU quota on each node (Cluster::cpu_quota), priced by what the
// quota gives each stage's compute intervals of replay rp: op_seconds
// priced a kernel at the quota's sustained rate (a rank computing the whole
// step alone) times the slowdown of all the node's ranks computing at once;
// a node whose ranks idle part of a period (pipeline waits, collectives)
// spends the rest of it faster, one whose ranks compute at once shares it
// (quota_cpu_seconds, the step repeating). For each stage, as a factor on
// that price: the rate of a rank alone at the quota over the rate its
// intervals received. The largest over the stage's nodes. A stage's ranks
// on a node are taken in step, as the replay has them; the emulated
// cluster's traces show dp peers of a stage drifting 0.1 s apart within a
// step and so taking turns a little (docs/planner.md, Validation 6).
// Stages whose every node holds ranks of no other stage (alone_ranks, by
// stage: the most of its ranks on one of them; 0 where it shares a node)
// are followed through the step by their node's QuotaClock instead (factor
// 1 here).
std::vector<double> quota_sharing(const Config& cfg, const Cluster& cl,
                                  const std::vector<std::vector<int>>& cnt,
                                  const std::vector<int>& alone_ranks,
                                  const std::vector<Replay>& rp) {
  const int P = cfg.parallel.pp;
  const double priced = concurrency_slowdown(cl, priced_ranks_on_node(cfg, cl));
  const QuotaNode q = quota_node(cl);
  const double alone = quota_share(q, 1);
  double step = 0;
  for (const Replay& r : rp) step = std::max(step, end_of(r));
  std::vector<double> f(size_t(P), 0.0);
  // Nodes holding the same ranks of each stage get the same: each once.
  const std::set<std::vector<int>> kinds(cnt.begin(), cnt.end());
  for (const auto& node : kinds) {
    std::vector<std::vector<std::pair<double, double>>> busy;
    std::vector<int> ranks, stage;
    for (int s = 0; s < P; ++s)
      if (node[size_t(s)] > 0 && alone_ranks[size_t(s)] == 0) {
        busy.push_back(rp[size_t(s)].busy);
        ranks.push_back(node[size_t(s)]);
        stage.push_back(s);
      }
    const std::vector<double> got = quota_cpu_seconds(busy, ranks, step, q);
    for (size_t g = 0; g < got.size(); ++g) {
      double T = 0;
      for (const auto& [b, e] : busy[g]) T += e - b;
      if (T <= 0 || got[g] <= 0) continue;
      const double rate = got[g] / T;  // CPUs a rank of the stage got while computing
      f[size_t(stage[g])] = std::max(f[size_t(stage[g])], alone / rate / priced);
    }
  }
  for (double& x : f)
    if (x == 0) x = 1;
  return f;
}

// Under a quota, a stage alone on its nodes: its node's clock (QuotaClock),
// the bucket full at first and then as the previous step left it. Returns
// the ranks of each stage alone on a node (0: it shares one).
std::vector<int> quota_clocks(const Config& cfg, const Cluster& cl,
                              const std::vector<std::vector<int>>& cnt, ReplayOpts& opt) {
  const int P = cfg.parallel.pp;
  std::vector<int> alone_ranks(size_t(P), 0);
  const QuotaNode q = quota_node(cl);
  const double per_price =
      quota_share(q, 1) / concurrency_slowdown(cl, priced_ranks_on_node(cfg, cl));
  for (int s = 0; s < P; ++s) {
    int k = 0;
    bool shares = false;
    for (const auto& node : cnt) {
      if (node[size_t(s)] == 0) continue;
      k = std::max(k, node[size_t(s)]);
      for (int o = 0; o < P; ++o) shares = shares || (o != s && node[size_t(o)] > 0);
    }
    alone_ranks[size_t(s)] = shares ? 0 : k;
    opt.quota.push_back(quota_clock(q, alone_ranks[size_t(s)], per_price, q.cpus * q.period));
  }
  return alone_ranks;
}
}  // namespace

NodeShare::NodeShare(const Config& cfg, const Cluster& cl, ReplayOpts& opt)
    : cfg_(cfg), cl_(cl), quota_(!cl.gpu() && cl.host.quota.cpus > 0) {
  if (!cl.concurrency.empty() || quota_) cnt_ = node_stages(cfg, cl);
  opt.busy = quota_ || stages_share_nodes(cnt_, cl);
  alone_ranks_ =
      quota_ ? quota_clocks(cfg, cl, cnt_, opt) : std::vector<int>(size_t(cfg.parallel.pp), 0);
}

// Stages sharing a node, or a quota on the nodes: replayed again at the
// rate their turns and idle give (node_sharing, quota_sharing) until it
// settles; halfway steps, as the turns move with it. A clock starts the
// next replay with the bucket the step's end left it.
void NodeShare::settle(const std::vector<Priced>& priced, const std::vector<int>& stand_in,
                       const std::vector<int>& slot, ReplayOpts& opt,
                       std::vector<Replay>& rp) const {
  const Config& cfg = cfg_;
  const Cluster& cl = cl_;
  const int P = cfg.parallel.pp;
  for (int it = 0; opt.busy && it < 20; ++it) {
    std::vector<double> next =
        quota_ ? quota_sharing(cfg, cl, cnt_, alone_ranks_, rp) : node_sharing(cfg, cl, cnt_, rp);
    double moved = 0;
    double step = 0;
    for (const Replay& r : rp) step = std::max(step, end_of(r));
    for (int s = 0; s < int(opt.quota.size()); ++s) {
      QuotaClock& c = opt.quota[size_t(s)];
      if (c.ranks == 0) continue;
      const QuotaClock& e = rp[size_t(s)].quota;
      const double tokens = std::min(e.cap, e.tokens + e.cpus * std::max(0.0, step - e.last));
      moved = std::max(moved, std::abs(tokens - c.tokens) / c.cap);
      c.tokens = tokens;
    }
    for (int s = 0; s < P; ++s) {
      const double was = opt.cscale.empty() ? 1.0 : opt.cscale[size_t(s)];
      if (it > 0) next[size_t(s)] = 0.5 * (next[size_t(s)] + was);
      moved = std::max(moved, std::abs(next[size_t(s)] / was - 1));
    }
    opt.cscale = next;
    rp = PipelineReplay(cfg, priced, stand_in, slot, {}, opt).run();
    if (moved < 1e-3) break;
  }
}

}  // namespace st::plan
