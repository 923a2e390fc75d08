// Implementation of rates.hpp: what one kernel call and one collective cost.
#include "plan/rates.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.hpp"

namespace st::plan {
namespace {

constexpr double kGemmFill = 256;  // GPU GEMM: elements of K lost to pipeline fill and drain

double log_distance(const Op& a, const Op& b) {
  double d = 0;
  for (int i = 0; i < 6; ++i)
    if (a.s[i] > 0 && b.s[i] > 0) d += std::abs(std::log(double(a.s[i]) / double(b.s[i])));
  return d + (a.ta != b.ta ? 0.1 : 0) + (a.tb != b.tb ? 0.1 : 0);
}

// A CPU op that calibrate did not time: the closest timed op of its kind,
// scaled by FLOPs (GEMM, attention) or by elements (the rest).
double measured_or_scaled(const Op& op, const Cluster& cl) {
  if (auto it = cl.op_seconds.find(op.key()); it != cl.op_seconds.end()) return it->second;
  Op best;
  double best_d = std::numeric_limits<double>::max(), best_t = 0;
  for (const auto& [key, t] : cl.op_seconds) {
    const Op cand = parse_op_key(key, cl.path + ": ops");
    if (cand.kind != op.kind) continue;
    const double d = log_distance(op, cand);
    if (d < best_d) best_d = d, best_t = t, best = cand;
  }
  if (best_d == std::numeric_limits<double>::max())
    throw UsageError(cl.path + ": no measured '" + std::string(op_name(op.kind)) +
                     "' op to price '" + op.key() +
                     "'; run `scaletrain-plan calibrate` with this model to measure it");
  const bool by_flops =
      op.kind == OpKind::Gemm || op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd;
  return best_t * (by_flops ? op.flops() / best.flops() : op.elements() / best.elements());
}

// Linear interpolation of y over log(x) through sorted points, clamped at
// both ends.
double interp_log(const std::vector<std::pair<double, double>>& pts, double x) {
  if (x <= pts.front().first) return pts.front().second;
  if (x >= pts.back().first) return pts.back().second;
  auto hi = std::lower_bound(pts.begin(), pts.end(), std::make_pair(x, 0.0),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  auto lo = std::prev(hi);
  const double w = std::log(x / lo->first) / std::log(hi->first / lo->first);
  return lo->second + w * (hi->second - lo->second);
}

// GEMM efficiency of a GEMM whose smallest dimension is `small`, from the
// pipeline fill argument alone (each output tile loses about kGemmFill
// elements of K to fill and drain).
double fill(double small) { return small / (small + kGemmFill); }

// With a rates table, efficiency.gemm / .attention / .network are the
// fractions of the table's rates a framework attains (1: the benchmark's
// own kernels; mpt-fit fits them), not fractions of the peak.
// Achieved FLOP/s of a bf16 GEMM from the table: interpolated over the
// smallest dimension between rows; beyond the rows, the nearest row's rate
// scaled by the fill factor (docs/planner.md).
double gemm_rate(const Rates& r, double small) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& g : r.gemm) pts.push_back({std::min({g.m, g.n, g.k}), g.flops});
  std::sort(pts.begin(), pts.end());
  if (small < pts.front().first) return pts.front().second * fill(small) / fill(pts.front().first);
  if (small > pts.back().first) return pts.back().second * fill(small) / fill(pts.back().first);
  return interp_log(pts, small);
}

// Achieved FLOP/s of fused attention: the rows of `block` kind at the
// nearest head dim, interpolated over the sequence length (0: the table
// has no row of that kind).
double attention_rate(const Rates& r, int head_dim, double seq, bool fwd,
                      const std::string& block = "causal") {
  int best = 0;
  for (const auto& a : r.attention)
    if (a.block == block && (!best || std::abs(std::log(double(a.head_dim) / head_dim)) <
                                          std::abs(std::log(double(best) / head_dim))))
      best = a.head_dim;
  std::vector<std::pair<double, double>> pts;
  for (const auto& a : r.attention)
    if (a.block == block && a.head_dim == best)
      pts.push_back({a.seq, fwd ? a.fwd_flops : a.bwd_flops});
  if (pts.empty()) return 0;
  std::sort(pts.begin(), pts.end());
  return interp_log(pts, seq);
}

// A GEMM's rate from the table: a row of the same shape (its three
// dimensions in any order: a transposed call runs the same tiles), else
// by its smallest dimension (gemm_rate).
double gemm_shape_rate(const Rates& r, const Op& op) {
  std::array<double, 3> want = {double(op.s[0]), double(op.s[1]), double(op.s[2])};
  std::sort(want.begin(), want.end());
  for (const auto& g : r.gemm) {
    std::array<double, 3> have = {g.m, g.n, g.k};
    std::sort(have.begin(), have.end());
    if (have == want) return g.flops;
  }
  return gemm_rate(r, want[0]);
}

// Achieved bandwidth of a memory-bound kernel moving `bytes` (rates.memory,
// linear in log between sizes, clamped at both ends).
double memory_rate(const Rates& r, double bytes) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& m : r.memory) pts.push_back({m.bytes, m.bw});
  return interp_log(pts, std::max(bytes, 1.0));
}

double busbw(const std::vector<BusBw>& v, double bytes) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& b : v) pts.push_back({b.bytes, b.busbw});
  return interp_log(pts, bytes);
}

}  // namespace

double concurrency_slowdown(const Cluster& cl, int ranks) {
  if (cl.concurrency.empty() || ranks <= 1) return 1.0;
  auto hi = cl.concurrency.lower_bound(ranks);
  if (hi != cl.concurrency.end() && hi->first == ranks) return hi->second;
  if (hi == cl.concurrency.end()) {
    const auto& [r, f] = *cl.concurrency.rbegin();
    return f * double(ranks) / double(r);
  }
  if (hi == cl.concurrency.begin()) return hi->second;
  auto lo = std::prev(hi);
  const double w = double(ranks - lo->first) / double(hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

AttnPrice attention_price(const Op& op, const Cluster& cl) {
  AttnPrice a;
  const bool fwd = op.kind == OpKind::AttnFwd;
  const int hd = int(op.s[4]);
  if (cl.pricing == "rates") {
    // A ring block [Tq, Tk] (cp > 1 in the op, recorded_step.hpp) holds the
    // causal pairs of two chunks of the zig-zag split: half its pairs, in
    // sub-blocks of one chunk (Tq / 2) each, causal on the diagonal and
    // full off it (test_cp_split). Priced at the `full` rows at the chunk
    // length; a table without them prices the block as the causal call of
    // the same pairs (Tq queries over Tq keys).
    const bool ring = op.s[5] > 1;
    a.flops = ring ? op.flops() / 2 : op.flops();
    a.seq = double(op.s[1]);
    if (ring) {
      a.rate = attention_rate(cl.rates, hd, a.seq / 2, fwd, "full");
      if (a.rate > 0) a.block = "full", a.seq /= 2;
    }
    if (!(a.rate > 0)) a.rate = attention_rate(cl.rates, hd, a.seq, fwd, "causal");
    if (!(a.rate > 0)) {  // the file has only `full` rows
      a.rate = attention_rate(cl.rates, hd, a.seq, fwd, "full");
      a.block = "full";
    }
  } else {
    // Fitted (and a file without pricing): a ring block for all its pairs
    // (Op::flops), at the causal rows at the op's length (2 Tq for a
    // block), times the fitted fraction: the rule the fractions were fitted
    // with.
    a.flops = op.flops();
    a.seq = double(op.s[1]) * double(op.s[5]);
    a.rate = cl.rates.attention.empty()
                 ? cl.peak_flops * cl.eff.attention
                 : attention_rate(cl.rates, hd, a.seq, fwd) * cl.eff.attention;
  }
  a.seconds = a.flops / a.rate;
  return a;
}

double op_seconds(const Op& op, const Cluster& cl, int ranks_on_node) {
  if (!cl.gpu()) return measured_or_scaled(op, cl) * concurrency_slowdown(cl, ranks_on_node);
  const double bytes = op.elements() * (op.kind == OpKind::Adam ? 4.0 : 2.0);
  if (cl.pricing == "rates") {
    // Measured rates as they are: a memory-bound kernel at the bandwidth
    // the device's elementwise kernels reach at its size, a GEMM at its
    // shape's rate, attention by attention_price, each plus one launch.
    if (op.kind == OpKind::Alloc) return 0;
    const double mem = bytes / memory_rate(cl.rates, bytes);
    double t = mem;
    if (op.kind == OpKind::Gemm) t = std::max(mem, op.flops() / gemm_shape_rate(cl.rates, op));
    if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd)
      t = std::max(mem, attention_price(op, cl).seconds);
    return t + cl.rates.launch;
  }
  const double mem = bytes / (cl.memory_bandwidth * cl.eff.memory);
  double t = mem;
  if (op.kind == OpKind::Alloc) return 0;  // the caching allocator reuses device memory
  if (op.kind == OpKind::Gemm) {
    // A GEMM's efficiency falls with its smallest dimension: each output
    // tile pays its pipeline's fill and drain, about two 128-deep K tiles
    // (kGemmFill); fixed by that argument, not fitted (docs/planner.md).
    const double small = double(std::min({op.s[0], op.s[1], op.s[2]}));
    const double rate = cl.rates.gemm.empty() ? cl.peak_flops * cl.eff.gemm * fill(small)
                                              : gemm_rate(cl.rates, small) * cl.eff.gemm;
    t = std::max(mem, op.flops() / rate);
  }
  if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd)
    t = std::max(mem, attention_price(op, cl).seconds);
  return t + cl.eff.kernel_overhead;
}

const char* CollPrice::name() const {
  if (kind == CollKind::SendRecv) return ring_shift ? "ring_shift" : "p2p";
  return coll_name(kind);
}

CollPrice coll_price(CollKind kind, Axis axis) {
  return {kind, kind == CollKind::SendRecv && axis == Axis::Cp};
}

double collective_seconds(CollPrice kind, double bytes, int ranks, bool inter, const Cluster& cl,
                          int per_node, int node_ranks) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  // Ring factors: bandwidth term and number of latency steps per collective,
  // from the seam's row of the kind; a ring shift sends, then receives
  // (ring_attention.cpp): two messages.
  const CollRow& row = coll_row(kind.kind);
  auto ring = [&](double r) -> std::pair<double, double> {
    const double k = kind.ring_shift ? 2 : 1;
    return {k * row.bus(int(r)), k * row.steps(int(r))};
  };
  // Measured fits (CPU clusters): the same kind, measured on the same side
  // of the node boundary (inter_node) before one that is not, then in the
  // nearest shape on the nodes (members per node, ranks of a node issuing
  // it at once; unsaid matches any), then at the nearest group size,
  // rescaled by the ring factors.
  const std::string name = kind.name();
  auto shape_gap = [](int measured, int want) {
    return measured <= 0 || want <= 0 ? 0.0 : std::abs(std::log2(double(measured) / want));
  };
  auto rank_of = [&](const MeasuredCollective& m) {
    return std::tuple(m.inter_node >= 0 && m.inter_node != inter,
                      shape_gap(m.per_node, per_node) + shape_gap(m.node_ranks, node_ranks),
                      std::abs(m.ranks - ranks));
  };
  const MeasuredCollective* best = nullptr;
  for (const auto& m : cl.collectives)
    if (m.kind == name && (!best || rank_of(m) < rank_of(*best))) best = &m;
  if (best) {
    // The measured group's time at this size (its points, else its fit),
    // latency steps and bytes rescaled to this group's ring.
    const auto [bw_m, lat_m] = ring(best->ranks);
    const auto [bw_n, lat_n] = ring(n);
    const double t = best->seconds(bytes), lat = std::min(best->fit.latency, t);
    return lat * lat_n / lat_m + (t - lat) * bw_n / bw_m;
  }
  const auto [bw, lat] = ring(n);
  const bool ring_coll = kind.kind == CollKind::AllReduce || kind.kind == CollKind::ReduceScatter ||
                         kind.kind == CollKind::AllGather;
  // Published or calibrated busbw (times efficiency.network across nodes,
  // efficiency.network_intra inside one: the fraction a framework attains;
  // nccl-tests: time = bytes x factor / busbw,
  // the factor being the ring term above, 1 for point-to-point). Across nodes
  // the table holds full nodes (one ring per NIC): fewer of the group's
  // devices per node use as many fewer NICs.
  if (const auto& tab = inter ? cl.rates.inter : cl.rates.intra; !tab.empty()) {
    double b = busbw(tab, bytes) * (inter ? cl.eff.network : cl.eff.intra());
    if (inter && ring_coll && per_node < cl.devices_per_node)
      b *= double(std::max(1, per_node)) / cl.devices_per_node;
    const double factor = ring_coll ? bw : 1;
    return std::max(bytes * factor / b, (inter ? cl.inter : cl.intra).latency);
  }
  double link_bw = cl.intra.bandwidth, link_lat = cl.intra.latency;
  if (inter) {
    link_lat = cl.inter.latency;
    link_bw = ring_coll ? std::min(cl.intra.bandwidth, std::max(1, per_node) * cl.inter.bandwidth)
                        : cl.inter.bandwidth;
  }
  const double b = kind.ring_shift && cl.gpu() ? 1 : bw;  // GPUs send and receive at once
  const double steps = kind.ring_shift && cl.gpu() ? 1 : lat;
  return steps * link_lat + b * bytes / (link_bw * (inter ? cl.eff.network : cl.eff.intra()));
}

}  // namespace st::plan
