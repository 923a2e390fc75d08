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
// the backward overlap none of it. And where a node's CPUs are shared, by
// ranks of different stages or under a CPU quota, the replay is repeated at
// the rate each stage's compute intervals receive (node_share.hpp).
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
#include "plan/node_share.hpp"
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
  const NodeShare share(cfg, cl, opt);
  std::vector<Replay> rp = PipelineReplay(cfg, priced, stand_in, slot, {}, opt).run();
  share.settle(priced, stand_in, slot, opt, rp);
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
