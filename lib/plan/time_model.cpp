// Implementation of time_model.hpp.
#include "plan/time_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "metrics/metrics.hpp"
#include "plan/layout.hpp"

namespace st::plan {
namespace {

struct Cost {
  double gemm = 0, attn = 0, elem = 0;
  double total() const { return gemm + attn + elem; }
  Cost& operator+=(const Cost& o) {
    gemm += o.gemm, attn += o.attn, elem += o.elem;
    return *this;
  }
};
Cost operator*(double k, Cost c) { return {k * c.gemm, k * c.attn, k * c.elem}; }
Cost operator+(Cost a, const Cost& b) { return a += b; }

Cost price(const std::vector<Op>& ops, const Cluster& cl, int ranks_on_node) {
  Cost c;
  for (const Op& o : ops) {
    const double t = op_seconds(o, cl, ranks_on_node);
    if (o.kind == OpKind::Gemm)
      c.gemm += t;
    else if (o.kind == OpKind::AttnFwd || o.kind == OpKind::AttnBwd)
      c.attn += t;
    else
      c.elem += t;
  }
  return c;
}

// Per-step timing of one pipeline stage from the simulation.
struct StageRun {
  double finish = 0, busy = 0, waits = 0;
  int receives = 0;
  // Start and end of the last micro-batch's backward of each chunk.
  std::map<int, std::pair<double, double>> last_bwd;
};

}  // namespace

StepPrediction predict_step(const Config& cfg, const Cluster& cl) {
  const auto& p = cfg.parallel;
  const auto& m = cfg.model;
  const int world = p.dp * p.tp * p.pp * p.cp;
  const int M = cfg.train.grad_accum, v = p.num_model_chunks, z = p.zero_stage;
  const int on_node = std::min(world, cl.devices_per_node);
  const double eb = cl.gpu() ? 2 : 4;  // bytes per activation element
  const bool async = cl.gpu();         // collectives progress in the background
  auto spans = [&](int size, int stride) { return size * stride > cl.devices_per_node; };
  const int dpcp = p.dp * p.cp;
  // The groups: size, whether they span nodes, and how many of their ranks
  // share a node (stride: tp innermost, then cp, dp, pp).
  struct Group {
    int n;
    bool inter;
    int per_node;
  };
  auto group = [&](int size, int stride) {
    return Group{size, spans(size, stride),
                 std::max(1, std::min(size, cl.devices_per_node / std::max(1, stride)))};
  };
  const Group tpG = group(p.tp, 1), cpG = group(p.cp, p.tp), dpcpG = group(dpcp, p.tp),
              ppG = group(p.pp, p.tp * p.cp * p.dp);
  auto coll = [&](const char* kind, double bytes, const Group& g) {
    return collective_seconds(kind, bytes, g.n, g.inter, cl, g.per_node);
  };

  const MicroDims D = micro_dims(cfg);
  const MicroOps mo = micro_ops(cfg);
  const Cost c_bf = price(mo.block_fwd, cl, on_node), c_bb = price(mo.block_bwd, cl, on_node),
             c_br = price(mo.block_recompute, cl, on_node);
  const Cost c_ef = price(mo.embed_fwd, cl, on_node), c_eb = price(mo.embed_bwd, cl, on_node);
  const Cost c_hf = price(mo.head_fwd, cl, on_node), c_hb = price(mo.head_bwd, cl, on_node);

  // Inline collectives per block (tp / sp, cp ring) and per head/embedding.
  const double row_bytes = double(D.N) * D.d * eb;  // [N, d] activations
  const bool sp = p.sp, tp = p.tp > 1;
  const std::string& mode = cfg.train.act_ckpt;
  double tp_f = 0, tp_b = 0, tp_r = 0, tp_ef = 0, tp_eb = 0, tp_hf = 0, tp_hb = 0;
  if (tp) {
    auto reduce = [&] {
      return sp ? coll("reduce_scatter", row_bytes, tpG) : coll("all_reduce", row_bytes, tpG);
    };
    const double gather = sp ? coll("all_gather", row_bytes, tpG) : 0;
    const double norm_grad = sp ? coll("all_reduce", double(D.d) * 4, tpG) : 0;
    tp_f = 2 * reduce() + 2 * gather;
    tp_b = 2 * reduce() + 2 * gather + 2 * norm_grad;
    tp_r = mode == "full" ? reduce() + 2 * gather : mode == "selective" ? 2 * gather : 0;
    tp_ef = reduce();
    tp_eb = gather;
    tp_hf = gather + coll("all_reduce", double(D.N) * 8, tpG) +
            coll("all_reduce", double(D.N) * 16, tpG);
    tp_hb = reduce() + norm_grad;
  }
  double cp_f = 0, cp_b = 0, cp_r = 0, cp_h = 0;
  if (p.cp > 1) {
    const double kv = double(D.N) * D.kd * eb;
    cp_f = (p.cp - 1) * coll("ring_shift", 2 * kv, cpG);
    cp_b = (p.cp - 1) * coll("ring_shift", 4 * kv, cpG) + coll("ring_shift", 2 * kv, cpG);
    cp_r = mode == "none" ? 0 : cp_f;
    cp_h = coll("all_reduce", 8, cpG);
  }
  // ZeRO 3: each layer is gathered for its forward and again for its
  // backward (the recomputation shares the backward's gather).
  const double wbytes = cl.gpu() ? 2 : 4;  // compute weights: bf16 on GPUs
  // Gradients travel in fp32, or bf16 with parallel.grad_reduce_dtype=bf16 (GPUs).
  const double gbytes = cl.gpu() && p.grad_reduce_dtype == "bf16" ? 2 : 4;
  auto gather_layer = [&](double elems) {
    return z >= 3 ? coll("all_gather", elems * wbytes, dpcpG) : 0;
  };
  const StageShape s0 = stage_shape(cfg, 0);
  const double g_block = gather_layer(double(s0.block_params));
  const double g_embed = gather_layer(double(D.V * D.d)),
               g_head = gather_layer(double(D.V * D.d + D.d));
  auto z3_exposed = [&](double g, double overlap_with) {
    return async ? std::max(0.0, g - overlap_with) : g;
  };

  // Durations of each (stage, chunk) forward and backward, and the p2p delay.
  struct Dur {
    double f = 0, b = 0;  // wall time of the op
    Cost cf, cb, cr;      // compute parts (cr: recompute, inside cb's op)
    double tp = 0, cp = 0, z3 = 0, z3_total = 0;
  };
  std::vector<std::vector<Dur>> dur(size_t(p.pp), std::vector<Dur>(size_t(v)));
  for (int st = 0; st < p.pp; ++st) {
    const StageShape sh = stage_shape(cfg, st);
    for (int c = 0; c < v; ++c) {
      Dur& d = dur[size_t(st)][size_t(c)];
      const double nl = sh.chunks[size_t(c)].second - sh.chunks[size_t(c)].first;
      const bool first = sh.first && c == 0, last = sh.last && c == v - 1;
      d.cf = nl * c_bf;
      d.cb = nl * c_bb;
      d.cr = nl * c_br;
      d.tp = nl * (tp_f + tp_b + tp_r);
      d.cp = nl * (cp_f + cp_b + cp_r);
      // Forward gathers hide behind the previous block's forward, backward
      // ones behind its backward (and recomputation).
      d.z3_total = 2 * nl * g_block;
      d.z3 = nl *
             (z3_exposed(g_block, c_bf.total()) + z3_exposed(g_block, c_bb.total() + c_br.total()));
      double f_extra = 0, b_extra = 0;
      if (first) {
        d.cf += c_ef;
        d.cb += c_eb;
        d.tp += tp_ef + tp_eb;
        d.z3_total += 2 * g_embed;
        d.z3 += 2 * z3_exposed(g_embed, c_bf.total());
        f_extra += tp_ef, b_extra += tp_eb;
      }
      if (last) {
        d.cf += c_hf;
        d.cb += c_hb;
        d.tp += tp_hf + tp_hb;
        d.cp += cp_h;
        d.z3_total += g_head;
        d.z3 += z3_exposed(g_head, c_bf.total());
        f_extra += tp_hf + cp_h, b_extra += tp_hb;
      }
      d.f = d.cf.total() + nl * (tp_f + cp_f) + f_extra + d.z3 / 2;
      d.b = d.cb.total() + d.cr.total() + nl * (tp_b + tp_r + cp_b + cp_r) + b_extra + d.z3 / 2;
    }
  }
  const double p2p = p.pp > 1 ? coll("p2p", double(D.Ns) * D.d * eb, ppG) : 0;

  // Simulate the schedule of every stage (virtual stage vs = chunk * pp + stage).
  const int V = p.pp * v;
  std::vector<std::vector<PipeStep>> ops;
  for (int st = 0; st < p.pp; ++st) ops.push_back(pipeline_ops(p.pp, v, M, st));
  const double unknown = -1;
  std::vector<double> fin_f(size_t(M * V), unknown), fin_b(size_t(M * V), unknown);
  std::vector<StageRun> run(size_t(p.pp));
  std::vector<size_t> next(size_t(p.pp), 0);
  std::vector<double> clock(size_t(p.pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < p.pp; ++st) {
      while (next[size_t(st)] < ops[size_t(st)].size()) {
        const PipeStep& op = ops[size_t(st)][next[size_t(st)]];
        const int vs = op.chunk * p.pp + st;
        double dep = 0;
        bool recv = false;
        if (op.forward && vs > 0) {
          dep = fin_f[size_t(op.micro * V + vs - 1)];
          recv = true;
        } else if (!op.forward && vs < V - 1) {
          dep = fin_b[size_t(op.micro * V + vs + 1)];
          recv = true;
        }
        if (dep == unknown) break;
        if (recv) dep += p2p;
        const Dur& d = dur[size_t(st)][size_t(op.chunk)];
        const double t = op.forward ? d.f : d.b;
        const double start = std::max(clock[size_t(st)], dep);
        StageRun& r = run[size_t(st)];
        r.waits += start - clock[size_t(st)];
        r.receives += recv;
        clock[size_t(st)] = start + t;
        r.busy += t;
        (op.forward ? fin_f : fin_b)[size_t(op.micro * V + vs)] = start + t;
        if (!op.forward && op.micro == M - 1) r.last_bwd[op.chunk] = {start, start + t};
        ++next[size_t(st)];
        progress = true;
      }
    }
  }
  for (int st = 0; st < p.pp; ++st) {
    ST_CHECK(next[size_t(st)] == ops[size_t(st)].size(), "pipeline simulation stalled");
    run[size_t(st)].finish = clock[size_t(st)];
  }

  // Gradient buckets per stage: launched in order once their parameters are
  // final during the last micro-batch's backward, reduced one after another.
  StepPrediction r;
  int crit = 0;
  double crit_end = -1, crit_dp_exposed = 0, crit_dp_total = 0;
  for (int st = 0; st < p.pp; ++st) {
    const StageShape sh = stage_shape(cfg, st);
    const std::vector<StageParam> ps = stage_params(cfg, sh);
    std::vector<double> ready(ps.size(), 0);
    for (size_t i = 0; i < ps.size(); ++i) {
      const auto [b0, b1] = run[size_t(st)].last_bwd[ps[i].chunk];
      const auto [l0, l1] = sh.chunks[size_t(ps[i].chunk)];
      const Dur& d = dur[size_t(st)][size_t(ps[i].chunk)];
      const double head = sh.last && ps[i].chunk == v - 1 ? c_hb.total() + tp_hb : 0;
      const double per_layer = (d.b - head) / std::max(1, l1 - l0);
      if (ps[i].layer == m.n_layers)
        ready[i] = b0 + head;
      else if (ps[i].layer < 0)
        ready[i] = b1;
      else
        ready[i] = b0 + head + per_layer * double(l1 - ps[i].layer);
    }
    double comm_end = 0, total = 0, launch = 0;
    if (dpcp > 1) {
      for (const GradBucket& b : grad_buckets(cfg, ps)) {
        for (size_t i = size_t(b.first); i < ps.size(); ++i) launch = std::max(launch, ready[i]);
        const double t = coll(z >= 2 ? "reduce_scatter" : "all_reduce", b.n * gbytes, dpcpG);
        comm_end = std::max(comm_end, launch) + t;
        total += t;
      }
    }
    const double exposed = std::max(0.0, comm_end - run[size_t(st)].finish);
    if (run[size_t(st)].finish + exposed > crit_end) {
      crit_end = run[size_t(st)].finish + exposed;
      crit = st;
      crit_dp_exposed = exposed;
      crit_dp_total = total;
    }
  }

  // Critical stage's parts.
  const StageRun& cr = run[size_t(crit)];
  for (int c = 0; c < v; ++c) {
    const Dur& d = dur[size_t(crit)][size_t(c)];
    const Cost all = double(M) * d.cf + double(M) * d.cb + double(M) * d.cr;
    r.gemm += all.gemm, r.attention += all.attn, r.elementwise += all.elem;
    r.recompute += double(M) * d.cr.total();
    r.tp.total += M * d.tp;
    r.cp.total += M * d.cp;
    r.zero.total += M * d.z3_total;
    r.zero.exposed += M * d.z3;
  }
  r.tp.exposed = r.tp.total;  // blocking, on the critical path
  r.cp.exposed = r.cp.total;
  r.pp.total = cr.receives * p2p;
  r.pp.exposed = std::min(cr.waits, r.pp.total);
  r.bubble = std::max(0.0, cr.waits - r.pp.exposed);
  r.dp.total = crit_dp_total;
  r.dp.exposed = crit_dp_exposed;

  // Loss and gradient-norm reductions (a few scalars each).
  auto small = [&](const Group& g) { return coll("all_reduce", 16, g); };
  r.other.total = small(dpcpG) + small(ppG) + (z > 0 ? small(dpcpG) : 0) + small(tpG) + small(ppG);
  r.other.exposed = r.other.total;

  // Optimizer: AdamW over this rank's slots and the squares for the norm;
  // ZeRO 1/2 then all-gather the updated shards bucket by bucket (blocking).
  const StageShape shc = stage_shape(cfg, crit);
  for (const Op& op : step_end_ops(cfg, shc.params)) r.optimizer += op_seconds(op, cl, on_node);
  if ((z == 1 || z == 2) && dpcp > 1) {
    for (const GradBucket& b : grad_buckets(cfg, stage_params(cfg, shc))) {
      const double t = coll("all_gather", b.n * wbytes, dpcpG);  // the compute weights
      r.zero.total += t;
      r.zero.exposed += t;
    }
  }
  r.step = crit_end + r.other.exposed + r.optimizer + ((z == 1 || z == 2) ? r.zero.exposed : 0);

  // Throughput and utilisation, as scaletrain-analyze computes them.
  r.devices = world;
  r.tokens_per_step = double(cfg.train.micro_batch) * M * p.dp * m.seq_len;
  r.tokens_per_s = r.tokens_per_step / r.step;
  r.tokens_per_s_device = r.tokens_per_s / world;
  metrics::ModelShape ms{model_params(m), m.n_layers, m.d_model, m.n_heads, m.seq_len};
  const double seq_s = r.tokens_per_s / m.seq_len;
  const double model_f = metrics::mpt_model_flops_per_seq(ms);
  r.mfu = metrics::utilization(model_f, seq_s, world, cl.peak_flops);
  r.hfu = metrics::utilization(metrics::hw_flops_per_seq(ms, model_f, mode), seq_s, world,
                               cl.peak_flops);
  return r;
}

}  // namespace st::plan
