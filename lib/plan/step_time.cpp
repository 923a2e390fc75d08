// predict_step (time_model.hpp): the recorded step of every pipeline stage
// (recorded_step.hpp) replayed on the cluster's prices. Each kernel, copy
// and collective is priced once (op_seconds, collective_seconds); the
// replay then walks each stage's timeline in issue order, with one clock
// per stream, one per communicator (its collectives run in order, after the
// work their stream had issued) and one for the host, and honours every
// recorded wait: a stream waiting for an event or a collective, the host
// waiting for one. So what the engine overlaps overlaps (gradient buckets
// behind the backward, ZeRO-3 prefetches behind the previous layer), and
// what it waits for on the compute stream blocks (tp / sp collectives, the
// cp ring). The stages run together: a pipeline op's receive starts once the
// neighbouring stage has issued the send of the op that sends it (a
// transfer starts when both sides have posted it), so the bubble comes out
// of the dependencies. Each op is its own segment of the record, from its
// start to its send; what follows the last op (the gradient reductions'
// waits, the norm and loss, the optimizer) is the step's end, which no
// other stage waits for. Ops of a schedule longer than the recording
// replay the recorded segment of the same kind (recorded_step.hpp).
// The critical stage's idle time in receives is split in two by a second
// replay, of the even pipeline: no stage carries its edge work (the first
// stage's embedding, the last one's head and loss) and every stage's ops
// take as long as the critical stage's own. Its idle there is the
// schedule's own bubble; what the real replay adds is the stages'
// imbalance (the edge work, an uneven layer split).
// Two facts of the cluster shape the replay. Where collectives do not
// progress on their own (Cluster::async_progress false: MPI requests on the
// default CPU device, progressed only inside the issuing thread's MPI
// calls), a collective on a communicator's clock starts no earlier than the
// thread's next wait for a collective: the gradient buckets launched during
// the backward overlap none of it. And where ranks of different stages
// share a node's cores (a CPU cluster's `concurrency`), they compute at once
// only part of the time: the replay is repeated with each stage's kernels
// at the slowdown its node's ranks cause over its compute intervals. Under
// a CPU quota on each node (a container's limit, an emulated node) the
// same repetition prices each stage's kernels at what the quota gives its
// intervals: ranks that idle part of a period spend the rest of it faster.
// A stage whose nodes hold no other stage's ranks is followed through the
// step instead (QuotaClock): each run of its kernels ends where the budget
// its node has left at the run's start takes it, so a burst after a
// pipeline wait goes faster than the same work done back to back.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "parallel/mesh.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/stages.hpp"
#include "plan/recorded_step.hpp"
#include "plan/replay.hpp"
#include "plan/time_model.hpp"

namespace st::plan {
namespace {

using record::Item;

Cls kernel_class(const Op& o, record::Kernel k) {
  if (k == record::Kernel::Adamw || k == record::Kernel::Sumsq) return kOptim;
  if (o.kind == OpKind::Gemm) return kGemm;
  if (o.kind == OpKind::AttnFwd || o.kind == OpKind::AttnBwd) return kAttn;
  return kElem;
}

// A collective's class in the step's parts: its CommPart (comm_part, the
// trainer's own rule for its telemetry).
Cls coll_class(const record::CollCall& c) { return cls_of(comm_part(c.axis.axis, c.kind, c.host)); }

}  // namespace

namespace {

std::shared_ptr<const Timeline> build_timeline(const StageRecord& r, const Config& cfg, bool gpu) {
  const record::RankStep& s = r.step;
  auto o = std::make_shared<Timeline>();
  std::map<std::string, int32_t> lanes, op_ix;
  std::map<std::tuple<int, bool, int64_t, int, int>, int32_t> coll_ix;
  std::map<int64_t, int32_t> alloc_ix;
  for (size_t i = 0; i < s.streams.size(); ++i) lanes[s.streams[i]] = int32_t(i);
  o->compute = lanes.count("compute") ? lanes["compute"] : 0;
  const size_t n = s.items.size();
  o->ref.assign(n, -1);
  o->alloc.assign(n, -1);
  o->cls.assign(n, kNone);
  o->edge.assign(n, 0);
  o->lane.resize(n);
  o->seg.assign(size_t(s.segments), {0, 0});
  o->head_end = n;
  o->tail_begin = n;
  auto add_op = [&](const Op& op) {
    auto [it, fresh] = op_ix.emplace(op.key(), int32_t(o->ops.size()));
    if (fresh) o->ops.push_back(op);
    return it->second;
  };
  for (size_t i = 0; i < n; ++i) {
    const Item& it = s.items[i];
    o->lane[i] = it.stream;
    o->edge[i] = it.edge;
    if (it.segment >= 0) {
      auto& sg = o->seg[size_t(it.segment)];
      if (sg.second == 0) sg.first = i;
      sg.second = i + 1;
      o->head_end = std::min(o->head_end, sg.first);
    }
    if (it.kind == Item::Kernel) {
      const record::KernelCall& k = s.kernels[size_t(it.ref)];
      const Op op = kernel_op(k);
      o->ref[i] = add_op(op);
      if (k.alloc_bytes > 0) {
        auto [a, fresh] = alloc_ix.emplace(k.alloc_bytes, int32_t(o->allocs.size()));
        if (fresh) o->allocs.push_back(k.alloc_bytes);
        o->alloc[i] = a->second;
      }
      o->cls[i] = kernel_class(op, k.kind);
    } else if (it.kind == Item::Copy) {
      o->ref[i] = add_op(copy_op(s.copies[size_t(it.ref)], gpu));
      o->cls[i] = kElem;
    } else if (it.kind == Item::Coll) {
      const record::CollCall& c = s.collectives[size_t(it.ref)];
      // Priced by (kind, axis, bytes): the axis gives its world-rank stride
      // (tp innermost, then cp, dp, pp).
      const Timeline::Coll tc{coll_price(c.kind, c.axis.axis), c.bytes, c.ranks, c.axis};
      const auto key = std::make_tuple(int(tc.kind.kind), tc.kind.ring_shift, tc.bytes, tc.ranks,
                                       tc.axis.stride);
      auto [ix, fresh] = coll_ix.emplace(key, int32_t(o->colls.size()));
      if (fresh) o->colls.push_back(tc);
      o->ref[i] = ix->second;
      o->cls[i] = coll_class(c);
      if (!c.host)
        o->lane[i] = lanes.emplace("comm:" + c.group, int32_t(lanes.size())).first->second;
    }
  }
  o->lanes = int(lanes.size());
  if (!o->seg.empty()) o->tail_begin = o->seg.back().second;
  // The replay walks the start, the segments and the end: nothing may lie
  // between two ops.
  for (size_t i = o->head_end; i < o->tail_begin; ++i)
    ST_CHECK(s.items[i].segment >= 0, "recorded step of stage ", r.stage, ": item ", i,
             " lies between two pipeline ops, outside every segment");
  return o;
}

// Where the group a stage's recorded rank (dp, cp, tp = 0) issued a
// collective on runs: whether it spans nodes, the most of its members on
// one node (the NICs it shares) and the most ranks on one of its nodes
// (`node_rank_count`: every rank of a node issues its own group's
// collective of the axis at the same point of the step, so they all share
// the node's link and cores). Its members are the group's first rank (the
// mesh's own span, mesh_axis_span) and every `stride` after it.
struct GroupNodes {
  bool inter = false;
  int per_node = 1, node_ranks = 1;
};
GroupNodes group_nodes(const GroupAxis& a, int ranks, int stage, const ParallelCfg& p,
                       const Cluster& cl, const std::map<int, int>& node_rank_count) {
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  const int world = d.world();
  const int first = mesh_axis_span(a.axis, mesh_rank({stage, 0, 0, 0}, d), d).first;
  std::map<int, int> on;
  for (int i = 0; i < ranks; ++i)
    ++on[cl.node_of(std::min(world - 1, first + i * std::max(1, a.stride)), world)];
  GroupNodes g;
  g.inter = on.size() > 1;
  for (const auto& [node, k] : on) {
    g.per_node = std::max(g.per_node, k);
    const auto it = node_rank_count.find(node);
    if (it != node_rank_count.end()) g.node_ranks = std::max(g.node_ranks, it->second);
  }
  return g;
}

// The ranks a kernel price assumes share the node: all of a node's, or
// the whole layout's when it is smaller (op_seconds' concurrency).
int priced_ranks_on_node(const Config& cfg, const Cluster& cl) {
  const auto& p = cfg.parallel;
  return std::min(p.dp * p.tp * p.pp * p.cp, cl.devices_per_node);
}

Priced price(std::shared_ptr<const StageRecord> r, const Config& cfg, const Cluster& cl) {
  std::call_once(r->once, [&] { r->timeline = build_timeline(*r, cfg, cl.gpu()); });
  const Timeline& t = *r->timeline;
  const auto& p = cfg.parallel;
  const int on_node = priced_ranks_on_node(cfg, cl);
  std::vector<double> op_s, alloc_s, coll_s;
  std::vector<double> op_attn;  // attention FLOPs as priced, per distinct op
  for (const Op& op : t.ops) {
    op_s.push_back(op_seconds(op, cl, on_node));
    const bool attn = op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd;
    op_attn.push_back(!attn ? 0.0 : cl.gpu() ? attention_price(op, cl).flops : op.flops());
  }
  for (int64_t b : t.allocs) alloc_s.push_back(op_seconds(alloc_op(b), cl, on_node));
  std::map<int, int> node_rank_count;  // node -> world ranks on it (measured collectives only)
  if (!t.colls.empty() && !cl.collectives.empty()) {
    const int world = p.dp * p.tp * p.pp * p.cp;
    for (int k = 0; k < world; ++k) ++node_rank_count[cl.node_of(k, world)];
  }
  for (const Timeline::Coll& c : t.colls) {
    const GroupNodes g = group_nodes(c.axis, c.ranks, r->stage, p, cl, node_rank_count);
    coll_s.push_back(collective_seconds(c.kind, double(c.bytes), c.ranks, g.inter, cl, g.per_node,
                                        g.node_ranks));
  }
  Priced o;
  o.rec = r;
  o.tl = r->timeline;
  const auto& items = r->step.items;
  o.dur.assign(items.size(), 0);
  o.attn_flops.assign(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    if (t.ref[i] < 0) continue;
    const bool coll = items[i].kind == Item::Coll;
    o.dur[i] = (coll ? coll_s : op_s)[size_t(t.ref[i])];
    if (items[i].kind == Item::Kernel) o.attn_flops[i] = op_attn[size_t(t.ref[i])];
    if (t.alloc[i] >= 0) o.dur[i] += alloc_s[size_t(t.alloc[i])];
  }
  o.run_end.assign(items.size(), 0);
  o.run_dur.assign(items.size(), 0);
  o.run_part.assign(items.size(), {0, 0, 0, 0});
  auto plain = [&](size_t i) {
    return items[i].kind == Item::Kernel || items[i].kind == Item::Copy;
  };
  for (size_t i = 0; i < items.size();) {
    size_t j = i;
    while (j < items.size() && plain(j) && t.lane[j] == t.lane[i] &&
           items[j].segment == items[i].segment && t.edge[j] == t.edge[i]) {
      o.run_dur[i] += o.dur[j];
      o.run_part[i][size_t(t.cls[j])] += o.dur[j];
      ++j;
    }
    o.run_end[i] = uint32_t(std::max(j, i + 1));
    i = o.run_end[i];
  }
  return o;
}

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
  q.cpus = cl.cpu_quota;
  q.period = cl.cpu_quota_period;
  q.cores = cl.cores_per_node;
  q.threads = cl.threads_per_rank;
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

// The critical stage's attention FLOPs as priced and the recomputation's
// share of its compute (StepPrediction::recompute), over the schedule's ops
// (each its recorded segment, Replay::tmpl) and the items outside every
// segment, at their priced seconds. Attention: the forward calls the
// engine ran beyond one per backward call (each block's forward again
// before its backward), at their price, so a long context's recomputed
// attention is what it cost, not a FLOP share. GEMMs and elementwise under
// full recomputation: the forward once more, a quarter of forward, again
// and backward (1 + 1 + 2 by FLOPs); selective recomputes no GEMM.
void attention_parts(const Replay& c, const std::string& act_ckpt, StepPrediction& r) {
  const Priced& pr = *c.pr;
  const auto& items = pr.rec->step.items;
  std::map<int, std::array<double, 4>> seg;  // flops, forward seconds, forward and backward calls
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].kind != Item::Kernel || pr.tl->cls[i] != kAttn) continue;
    const bool fwd = pr.tl->ops[size_t(pr.tl->ref[i])].kind == OpKind::AttnFwd;
    auto& a = seg[items[i].segment];
    a[0] += pr.attn_flops[i];
    a[1] += fwd ? pr.dur[i] : 0.0;
    a[fwd ? 2 : 3] += 1;
  }
  std::array<double, 4> t{};
  auto add = [&](int s) {
    if (const auto it = seg.find(s); it != seg.end())
      for (size_t k = 0; k < 4; ++k) t[k] += it->second[k];
  };
  add(-1);
  for (size_t op = 0; op < c.ops.size(); ++op) add(c.tmpl[op]);
  r.attention_flops = t[0];
  const double again = t[2] > 0 ? t[1] * std::max(0.0, t[2] - t[3]) / t[2] : 0.0;
  r.recompute = again + (act_ckpt == "full" ? (r.gemm + r.elementwise) / 4 : 0.0);
}

}  // namespace

namespace {
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

// Stages sharing a node, or a quota on the nodes: replayed again at the
// rate their turns and idle give (node_sharing, quota_sharing) until it
// settles; halfway steps, as the turns move with it. A clock starts the
// next replay with the bucket the step's end left it.
void settle(const Config& cfg, const Cluster& cl, const std::vector<std::vector<int>>& cnt,
            const std::vector<int>& alone_ranks, const std::vector<Priced>& priced,
            const std::vector<int>& stand_in, const std::vector<int>& slot, ReplayOpts& opt,
            std::vector<Replay>& rp) {
  const int P = cfg.parallel.pp;
  const bool quota = !cl.gpu() && cl.cpu_quota > 0;
  for (int it = 0; opt.busy && it < 20; ++it) {
    std::vector<double> next =
        quota ? quota_sharing(cfg, cl, cnt, alone_ranks, rp) : node_sharing(cfg, cl, cnt, rp);
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

// Throughput and utilisation, as scaletrain-analyze computes them.
void throughput(const Config& cfg, const Cluster& cl, StepPrediction& r) {
  const auto& p = cfg.parallel;
  const auto& m = cfg.model;
  const int world = p.dp * p.tp * p.pp * p.cp;
  const std::string& mode = cfg.train.act_ckpt;
  r.devices = world;
  r.tokens_per_step = double(cfg.train.micro_batch) * cfg.train.grad_accum * p.dp * m.seq_len;
  r.tokens_per_s = r.tokens_per_step / r.step;
  r.tokens_per_s_device = r.tokens_per_s / world;
  metrics::ModelShape ms{count_params(m), m.n_layers, m.d_model, m.n_heads, m.seq_len};
  const double seq_s = r.tokens_per_s / m.seq_len;
  const double model_f = metrics::mpt_model_flops_per_seq(ms);
  const double hw_f = metrics::hw_flops_per_seq(ms, model_f, mode);
  r.mfu = metrics::utilization(model_f, seq_s, world, cl.peak_flops);
  r.hfu = metrics::utilization(hw_f, seq_s, world, cl.peak_flops);
}
}  // namespace

StepParts StepPrediction::parts() const {
  StepParts p{};
  p[ix(StepPart::Compute)] = compute();
  p[ix(StepPart::Optimizer)] = optimizer;
  p[ix(StepPart::Comm)] = exposed_comm() + bubble + imbalance;
  double known = 0;
  for (double v : p) known += v;
  p[ix(StepPart::Other)] = step - known;
  return p;
}

StepPrediction predict_step(const Config& cfg, const Cluster& cl) {
  const auto& p = cfg.parallel;
  const int P = p.pp;
  std::vector<Priced> priced;
  std::vector<int> stand_in(static_cast<size_t>(P)), slot(static_cast<size_t>(P), -1);
  for (int s = 0; s < P; ++s) {
    stand_in[size_t(s)] = stand_in_stage(cfg, s);
    if (stand_in[size_t(s)] != s) continue;
    slot[size_t(s)] = int(priced.size());
    priced.push_back(price(stage_record(cfg, s), cfg, cl));
  }
  ReplayOpts opt;
  opt.polls = !cl.async_progress();
  const bool quota = !cl.gpu() && cl.cpu_quota > 0;
  const std::vector<std::vector<int>> cnt =
      cl.concurrency.empty() && !quota ? std::vector<std::vector<int>>{} : node_stages(cfg, cl);
  opt.busy = quota || stages_share_nodes(cnt, cl);
  const std::vector<int> alone_ranks =
      quota ? quota_clocks(cfg, cl, cnt, opt) : std::vector<int>(size_t(P), 0);
  std::vector<Replay> rp = PipelineReplay(cfg, priced, stand_in, slot, {}, opt).run();
  settle(cfg, cl, cnt, alone_ranks, priced, stand_in, slot, opt, rp);
  opt.busy = false;

  // The critical stage: the one that ends last.
  int crit = 0;
  for (int s = 1; s < P; ++s)
    if (end_of(rp[size_t(s)]) > end_of(rp[size_t(crit)])) crit = s;
  const Replay& c = rp[size_t(crit)];
  StepPrediction r;
  r.gemm = c.part[kGemm];
  r.attention = c.part[kAttn];
  r.elementwise = c.part[kElem];
  r.optimizer = c.part[kOptim];
  // Its idle time in receives: the schedule's own bubble (its idle in the
  // even pipeline, where every stage's ops take as long as its own and none
  // carries embedding, head or loss) and what the stages' unequal work (the
  // edge work, an uneven layer split) adds to it.
  r.bubble = c.bubble;
  if (P > 1) {
    std::vector<double> scale(static_cast<size_t>(P), 1.0);
    for (int s = 0; s < P; ++s)
      if (rp[size_t(s)].work > 0) scale[size_t(s)] = c.work / rp[size_t(s)].work;
    const std::vector<Replay> even = PipelineReplay(cfg, priced, stand_in, slot, scale, opt).run();
    r.bubble = std::min(c.bubble, even[size_t(crit)].bubble);
    r.imbalance = c.bubble - r.bubble;
  }
  for (CommPart p : kAllCommParts) {
    const Cls k = cls_of(p);
    r.comm[ix(p)].total = c.total[k];
    r.comm[ix(p)].exposed = std::min(c.exposed[k], c.total[k]);
  }
  // Blocking collectives waited for on the host (the loss and norm
  // reductions) are exposed whole.
  r.part(CommPart::Other).exposed = r.part(CommPart::Other).total;
  r.step = end_of(c);
  for (int s = 0; s < P; ++s) {
    const auto& part = rp[size_t(s)].part;
    r.stage_waits.push_back(
        std::max(0.0, r.step - part[kGemm] - part[kAttn] - part[kElem] - part[kOptim]));
  }

  throughput(cfg, cl, r);
  const std::string& mode = cfg.train.act_ckpt;
  attention_parts(c, mode, r);  // attention FLOPs and the recomputation
  return r;
}

}  // namespace st::plan
