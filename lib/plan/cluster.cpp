// Implementation of cluster.hpp: strict YAML reading (every key known, typed
// and in range, each error with file:line and key) and writing.
#include "plan/cluster.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "config/yaml_text.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "metrics/metrics.hpp"

namespace st::plan {
namespace {

// Reads one map of the file, refusing keys it was not asked about.
class Section {
 public:
  Section(std::string file, std::string prefix, YAML::Node node, std::vector<std::string> keys)
      : file_(std::move(file)), prefix_(std::move(prefix)), node_(node), keys_(std::move(keys)) {
    if (!node_.IsMap())
      throw UsageError(where(node_) + ": '" + (prefix_.empty() ? "the file" : prefix_) +
                       "' must be a map of keys (valid: " + join(keys_) + ")");
    for (const auto& it : node_) {
      const std::string k = it.first.as<std::string>();
      if (std::find(keys_.begin(), keys_.end(), k) == keys_.end()) {
        const std::string hint = closest(k, keys_);
        throw UsageError(where(it.first) + ": unknown key '" + full(k) + "'" +
                         (hint.empty() ? "" : "; did you mean '" + full(hint) + "'?") +
                         " (valid: " + join(keys_) + ")");
      }
    }
  }
  bool has(const std::string& k) const { return bool(node_[k]); }
  YAML::Node node(const std::string& k) const { return node_[k]; }
  std::string where(const YAML::Node& n) const {
    const auto m = n.Mark();
    return m.is_null() ? file_ : file_ + ":" + std::to_string(m.line + 1);
  }
  std::string full(const std::string& k) const { return prefix_.empty() ? k : prefix_ + "." + k; }

  std::string str(const std::string& k, const std::string& def, bool required = false,
                  const std::vector<std::string>& choices = {}) const {
    if (!has(k)) {
      if (required) throw UsageError(file_ + ": missing key '" + full(k) + "'");
      return def;
    }
    const YAML::Node n = node_[k];
    if (!n.IsScalar()) throw UsageError(where(n) + ": '" + full(k) + "': expected a string");
    const std::string v = n.Scalar();
    if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end())
      throw UsageError(where(n) + ": '" + full(k) + "': '" + v + "' is not one of " +
                       join(choices, "|"));
    return v;
  }
  double num(const std::string& k, double def, bool required, double lo, double hi,
             bool lo_open = false) const {
    if (!has(k)) {
      if (required) throw UsageError(file_ + ": missing key '" + full(k) + "'");
      return def;
    }
    return number(node_[k], full(k), lo, hi, lo_open);
  }
  double number(const YAML::Node& n, const std::string& name, double lo, double hi,
                bool lo_open) const {
    double v = std::nan("");
    if (n.IsScalar()) {
      try {
        size_t pos = 0;
        v = std::stod(n.Scalar(), &pos);
        if (pos != n.Scalar().size()) v = std::nan("");
      } catch (const std::logic_error&) {
      }
    }
    const std::string range = std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]";
    if (!std::isfinite(v))
      throw UsageError(where(n) + ": '" + name + "': expected a number in " + range + ", got '" +
                       (n.IsScalar() ? n.Scalar() : std::string("a list or map")) + "'");
    if (v < lo || v > hi || (lo_open && v == lo))
      throw UsageError(where(n) + ": '" + name + "': " + fmt(v) + " is outside " + range);
    return v;
  }
  static std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
  }
  static std::string fmt(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }

 private:
  std::string file_, prefix_;
  YAML::Node node_;
  std::vector<std::string> keys_;
};

Link read_link(const std::string& path, const Section& top, const std::string& key, bool required) {
  if (!top.has(key)) {
    if (required) throw UsageError(path + ": missing key '" + key + "'");
    return {};
  }
  const Section s(path, key, top.node(key), {"bandwidth_gbps", "latency_us"});
  return {s.num("bandwidth_gbps", 0, true, 0, 1e6, true) * 1e9,
          s.num("latency_us", 0, true, 0, 1e6) * 1e-6};
}

// The `rates` section: lists of maps, every entry checked.
Rates read_rates(const std::string& path, const Section& top) {
  Rates r;
  const Section s(path, "rates", top.node("rates"),
                  {"gemm", "attention", "busbw_intra", "busbw_inter", "memory", "launch_us"});
  auto list = [&](const std::string& key, const std::vector<std::string>& keys, auto&& each) {
    if (!s.has(key)) return;
    const YAML::Node n = s.node(key);
    if (!n.IsSequence())
      throw UsageError(s.where(n) + ": 'rates." + key + "' must be a list of {" +
                       Section::join(keys) + "}");
    for (size_t i = 0; i < n.size(); ++i)
      each(Section(path, "rates." + key + "[" + std::to_string(i) + "]", n[i], keys));
  };
  list("gemm", {"m", "n", "k", "tflops"}, [&](const Section& e) {
    r.gemm.push_back({e.num("m", 0, true, 1, 1e9), e.num("n", 0, true, 1, 1e9),
                      e.num("k", 0, true, 1, 1e9), e.num("tflops", 0, true, 0, 1e5, true) * 1e12});
  });
  list("attention", {"head_dim", "seq", "fwd_tflops", "bwd_tflops", "block"},
       [&](const Section& e) {
         r.attention.push_back({int(e.num("head_dim", 0, true, 1, 1 << 16)),
                                e.num("seq", 0, true, 1, 1e9),
                                e.num("fwd_tflops", 0, true, 0, 1e5, true) * 1e12,
                                e.num("bwd_tflops", 0, true, 0, 1e5, true) * 1e12,
                                e.str("block", "causal", false, {"causal", "full"})});
       });
  list("memory", {"bytes", "gbps"}, [&](const Section& e) {
    r.memory.push_back(
        {e.num("bytes", 0, true, 1, 1e15), e.num("gbps", 0, true, 0, 1e6, true) * 1e9});
  });
  std::sort(r.memory.begin(), r.memory.end(),
            [](const MemRate& a, const MemRate& b) { return a.bytes < b.bytes; });
  if (s.has("launch_us")) r.launch = s.num("launch_us", 0, true, 0, 1e4) * 1e-6;
  for (const char* key : {"busbw_intra", "busbw_inter"}) {
    auto& v = std::string(key) == "busbw_intra" ? r.intra : r.inter;
    list(key, {"bytes", "gbps"}, [&](const Section& e) {
      v.push_back({e.num("bytes", 0, true, 1, 1e15), e.num("gbps", 0, true, 0, 1e6, true) * 1e9});
    });
    std::sort(v.begin(), v.end(), [](const BusBw& a, const BusBw& b) { return a.bytes < b.bytes; });
  }
  return r;
}

// An `efficiency` map (or a profile's), over `base`.
Cluster::Efficiency read_efficiency(const std::string& path, const std::string& key,
                                    const YAML::Node& node, Cluster::Efficiency base) {
  const Section e(
      path, key, node,
      {"gemm", "attention", "memory", "network", "network_intra", "kernel_overhead_us"});
  base.gemm = e.num("gemm", base.gemm, false, 0, 1, true);
  base.attention = e.num("attention", base.attention, false, 0, 1, true);
  base.memory = e.num("memory", base.memory, false, 0, 1, true);
  base.network = e.num("network", base.network, false, 0, 4, true);
  base.network_intra_given = e.has("network_intra");
  base.network_intra = e.num("network_intra", 1, false, 0, 4, true);
  base.kernel_overhead = e.num("kernel_overhead_us", 0, false, 0, 1e6) * 1e-6;
  return base;
}

// `pricing`, `efficiency` and `profiles` (after `rates`): how the file is
// priced, checked against what it holds.
void read_pricing(const std::string& path, const Section& s, Cluster& c) {
  // With kernel rates, a fitted gemm / attention / network is a fraction of
  // those rates (rates.cpp): 1 unless the file or profile says otherwise.
  Cluster::Efficiency fitted_base;
  if (!c.rates.empty()) fitted_base.gemm = fitted_base.attention = fitted_base.network = 1;
  if (c.gpu()) {
    c.pricing = s.str("pricing", "", false, {"rates", "fitted"});
    // Files written before the key (calibrate-gpu's output of earlier
    // releases, results/gpu-check-h200-20261204) carry `efficiency` and were
    // priced by it: they still load, as what they are.
    if (c.pricing.empty() && s.has("efficiency")) c.pricing = "fitted";
    if (c.pricing.empty())
      throw UsageError(path +
                       ": missing key 'pricing' (a kind: gpu file says how it is priced: 'rates', "
                       "the `rates` tables as measured, for our own trainer; 'fitted', the "
                       "`efficiency` fractions fitted to another framework's published table)");
  } else {
    for (const char* k : {"pricing", "profiles"})
      if (s.has(k))
        throw UsageError(s.where(s.node(k)) + ": '" + k +
                         "' is a kind: gpu key (a cpu cluster is priced by its measured ops)");
  }
  if (c.pricing == "rates") {
    if (s.has("efficiency"))
      throw UsageError(s.where(s.node("efficiency")) +
                       ": 'efficiency' with pricing: rates; a rates-priced file takes no fitted "
                       "fractions (put them under profiles.<name>, or say pricing: fitted)");
    std::string missing;
    if (c.rates.gemm.empty()) missing += " rates.gemm";
    if (c.rates.attention.empty()) missing += " rates.attention";
    if (c.rates.memory.empty()) missing += " rates.memory";
    if (c.rates.launch < 0) missing += " rates.launch_us";
    if (!missing.empty())
      throw UsageError(path + ": pricing: rates needs" + missing +
                       " (measure them with `scaletrain-plan calibrate-gpu`, or cite public "
                       "figures; docs/planner.md)");
    c.eff.gemm = c.eff.attention = c.eff.memory = c.eff.network = c.eff.network_intra = 1;
    c.eff.network_intra_given = true;
    c.eff.kernel_overhead = c.rates.launch;
  } else {
    c.eff = s.has("efficiency")
                ? read_efficiency(path, "efficiency", s.node("efficiency"), fitted_base)
                : fitted_base;
  }
  if (s.has("profiles")) {
    const YAML::Node n = s.node("profiles");
    if (!n.IsMap())
      throw UsageError(s.where(n) +
                       ": 'profiles' must be a map of name: {gemm, attention, "
                       "memory, network, network_intra, kernel_overhead_us}");
    for (const auto& it : n) {
      const std::string name = it.first.as<std::string>();
      c.profiles[name] = read_efficiency(path, "profiles." + name, it.second, fitted_base);
    }
  }
}

}  // namespace

Cluster with_profile(const Cluster& c, const std::string& name) {
  const auto it = c.profiles.find(name);
  if (it == c.profiles.end()) {
    std::string have;
    for (const auto& [k, e] : c.profiles) have += (have.empty() ? "" : ", ") + k;
    throw UsageError((c.path.empty() ? c.name : c.path) + ": no profile '" + name + "' (" +
                     (have.empty() ? "the file has no profiles" : "its profiles: " + have) + ")");
  }
  Cluster o = c;
  o.pricing = "fitted";
  o.profile = name;
  o.eff = it->second;
  return o;
}

Cluster fitted_pricing(const Cluster& c, const std::string& name) {
  return c.pricing == "rates" ? with_profile(c, name) : c;
}

double MeasuredCollective::seconds(double bytes) const {
  const double by_fit = fit.latency + bytes / fit.bandwidth;
  if (points.empty()) return by_fit;
  if (bytes <= points.front().first) return std::min(by_fit, points.front().second);
  if (bytes >= points.back().first) return points.back().second * bytes / points.back().first;
  const auto hi = std::upper_bound(points.begin(), points.end(), bytes,
                                   [](double b, const auto& p) { return b < p.first; });
  const auto lo = hi - 1;
  const double f = (bytes - lo->first) / (hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

int Cluster::node_of(int rank, int world) const {
  if (size_t(rank) < rank_node.size()) return rank_node[size_t(rank)];
  const int per = std::max(1, devices_per_node);
  if (placement == "cyclic") return rank % std::max(1, (world + per - 1) / per);
  return rank / per;
}

namespace {
// `collectives`: the measured collectives, each a fit and (optionally) the
// points it was fitted to.
void read_collectives(const std::string& path, const Section& s, Cluster& c) {
  if (!s.has("collectives")) return;
  const YAML::Node n = s.node("collectives");
  if (!n.IsSequence())
    throw UsageError(s.where(n) +
                     ": 'collectives' must be a list of {kind, ranks, latency_us, bandwidth_gbps}");
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string at = "collectives[" + std::to_string(i) + "]";
    const Section e(path, at, n[i],
                    {"kind", "ranks", "latency_us", "bandwidth_gbps", "inter_node", "per_node",
                     "node_ranks", "points"});
    MeasuredCollective m;
    if (e.has("inter_node"))
      m.inter_node = e.str("inter_node", "", true, {"true", "false"}) == "true" ? 1 : 0;
    m.kind = e.str("kind", "", true,
                   {"all_reduce", "reduce_scatter", "all_gather", "ring_shift", "p2p"});
    // Counts of ranks: whole numbers (1.5 ranks would be read as 1).
    auto count = [&](const std::string& k, bool required, int lo, int hi) {
      const double v = e.num(k, 0, required, lo, hi);
      if (v != std::floor(v))
        throw UsageError(e.where(e.node(k)) + ": '" + at + "." + k + "': " + Section::fmt(v) +
                         " is not a whole number of ranks");
      return int(v);
    };
    m.ranks = count("ranks", true, 2, 1 << 20);
    // Members per node (1 ... ranks) and the ranks of a node issuing it at
    // once (per_node ... ), both optional.
    m.per_node = count("per_node", false, 1, m.ranks);
    m.node_ranks = count("node_ranks", false, std::max(1, m.per_node), 1 << 20);
    if (m.inter_node == 1 && m.per_node == m.ranks)
      throw UsageError(e.where(n[i]) + ": '" + at + "': inter_node true with per_node " +
                       std::to_string(m.per_node) + " = ranks: a group across nodes has " +
                       "fewer members on each node than it has ranks");
    m.fit.latency = e.num("latency_us", 0, true, 0, 1e7) * 1e-6;
    m.fit.bandwidth = e.num("bandwidth_gbps", 0, true, 0, 1e6, true) * 1e9;
    if (e.has("points")) {
      const YAML::Node pts = e.node("points");
      if (!pts.IsSequence())
        throw UsageError(e.where(pts) + ": '" + at +
                         ".points' must be a list of [bytes, seconds] pairs, ascending bytes");
      for (size_t j = 0; j < pts.size(); ++j) {
        const std::string pj = at + ".points[" + std::to_string(j) + "]";
        if (!pts[j].IsSequence() || pts[j].size() != 2)
          throw UsageError(e.where(pts[j]) + ": '" + pj + "' must be a pair [bytes, seconds]");
        const double b = e.number(pts[j][0], pj + "[0] (bytes)", 0, 1e15, true);
        const double t = e.number(pts[j][1], pj + "[1] (seconds)", 0, 1e6, true);
        if (!m.points.empty() && b <= m.points.back().first)
          throw UsageError(e.where(pts[j]) + ": '" + pj + "': " + Section::fmt(b) +
                           " bytes after " + Section::fmt(m.points.back().first) +
                           ": the points must be in ascending bytes");
        m.points.push_back({b, t});
      }
    }
    c.collectives.push_back(m);
  }
}

// A CPU cluster's measured `ops` and the slowdown of ranks computing at once
// (`concurrency`).
void read_ops(const Section& s, Cluster& c) {
  if (s.has("ops")) {
    const YAML::Node n = s.node("ops");
    if (!n.IsMap()) throw UsageError(s.where(n) + ": 'ops' must be a map of op key: seconds");
    for (const auto& it : n) {
      const std::string key = it.first.as<std::string>();
      c.op_seconds[key] = s.number(it.second, "ops['" + key + "']", 0, 1e6, true);
    }
  }
  if (s.has("concurrency")) {
    const YAML::Node n = s.node("concurrency");
    if (!n.IsMap()) throw UsageError(s.where(n) + ": 'concurrency' must be a map of ranks: factor");
    for (const auto& it : n) {
      const double r = s.number(it.first, "concurrency key (ranks)", 1, 1 << 20, false);
      c.concurrency[int(r)] =
          s.number(it.second, "concurrency[" + it.first.Scalar() + "]", 0, 1e3, true);
    }
  }
}
}  // namespace

Cluster load_cluster(const std::string& path) {
  const YAML::Node root = parse_yaml_text(read_file(path), path);
  const Section s(path, "", root,
                  {"name",
                   "device",
                   "kind",
                   "precision",
                   "peak_tflops",
                   "memory_gib",
                   "memory_reserved_gib",
                   "memory_bandwidth_gbps",
                   "devices_per_node",
                   "placement",
                   "nodes",
                   "cores_per_node",
                   "threads_per_rank",
                   "intra_node",
                   "inter_node",
                   "efficiency",
                   "ops",
                   "concurrency",
                   "collectives",
                   "collective_progress",
                   "cpu_quota",
                   "rates",
                   "pricing",
                   "profiles",
                   "notes",
                   "calibrated"});
  Cluster c;
  c.path = path;
  c.name = s.str("name", "", true);
  c.device = s.str("device", "", true);
  c.kind = s.str("kind", "gpu", false, {"gpu", "cpu"});
  c.precision = s.str("precision", c.kind == "cpu" ? "fp32" : "bf16", false,
                      {"bf16", "fp16", "fp8", "tf32", "fp32"});
  if (s.has("peak_tflops")) {
    c.peak_flops = s.num("peak_tflops", 0, true, 0, 1e6, true) * 1e12;
    c.peak_source = path + ": peak_tflops";
  } else if (auto p = metrics::peak_flops(c.device, c.precision)) {
    c.peak_flops = p->flops;
    c.peak_source =
        "lib/metrics peak table: " + p->device + " " + p->precision + " (" + p->source + ")";
  } else {
    throw UsageError(path +
                     ": no 'peak_tflops' and lib/metrics' peak table has no entry for device '" +
                     c.device + "' at precision " + c.precision +
                     "; add peak_tflops: <dense TFLOP/s per device>");
  }
  c.memory_bytes = s.num("memory_gib", 0, true, 0, 1e6, true) * double(1ull << 30);
  c.memory_reserved = s.num("memory_reserved_gib", 0, false, 0, 1e6) * double(1ull << 30);
  if (c.memory_reserved >= c.memory_bytes)
    throw UsageError(path + ": memory_reserved_gib must be below memory_gib");
  c.memory_bandwidth = s.num("memory_bandwidth_gbps", 0, c.gpu(), 0, 1e6, true) * 1e9;
  c.devices_per_node = int(s.num("devices_per_node", 1, true, 1, 1 << 20));
  c.placement = s.str("placement", "block", false, {"block", "cyclic"});
  c.nodes = int(s.num("nodes", 0, false, 0, 1 << 24));
  c.host.cores = int(s.num("cores_per_node", 0, c.kind == "cpu", 0, 1 << 20));
  c.host.threads = int(s.num("threads_per_rank", 1, false, 1, 1 << 20));
  c.intra = read_link(path, s, "intra_node", true);
  c.inter = read_link(path, s, "inter_node", false);
  if (c.inter.bandwidth == 0) c.inter = c.intra;
  if (s.has("rates")) c.rates = read_rates(path, s);
  read_pricing(path, s, c);
  read_ops(s, c);
  read_collectives(path, s, c);
  if (s.has("collective_progress"))
    c.progress = s.str("collective_progress", "", true, {"async", "polls"}) == "async" ? 1 : -1;
  if (s.has("cpu_quota")) {
    if (c.gpu())
      throw UsageError(s.where(s.node("cpu_quota")) +
                       ": 'cpu_quota' is a kind: cpu fact (a cgroup's CPU quota on each node); "
                       "a gpu cluster has none");
    const Section q(path, "cpu_quota", s.node("cpu_quota"), {"cpus", "period_us"});
    c.host.quota.cpus = q.num("cpus", 0, true, 0, 1 << 20, true);
    c.host.quota.period = q.num("period_us", 100000, false, 1000, 1e7) * 1e-6;
    c.host.quota.where = path + ": cpu_quota";
  }
  c.notes = s.str("notes", "");
  if (s.has("calibrated")) {
    const YAML::Node n = s.node("calibrated");
    if (!n.IsMap()) throw UsageError(s.where(n) + ": 'calibrated' must be a map of strings");
    for (const auto& it : n) c.meta[it.first.as<std::string>()] = it.second.as<std::string>();
  }
  if (c.kind == "cpu" && c.op_seconds.empty())
    throw UsageError(path +
                     ": a kind: cpu cluster needs measured 'ops' (write it with "
                     "`scaletrain-plan calibrate`)");
  return c;
}

namespace {

// cluster_to_yaml's `pricing`, `efficiency` (unless priced by rates) and
// `profiles`.
void write_pricing(std::ostream& o, const Cluster& c) {
  auto eff = [&](const Cluster::Efficiency& e) {
    o << "{gemm: " << e.gemm << ", attention: " << e.attention << ", memory: " << e.memory
      << ", network: " << e.network << ", kernel_overhead_us: " << e.kernel_overhead * 1e6;
    if (e.network_intra_given) o << ", network_intra: " << e.network_intra;
    o << "}";
  };
  if (!c.pricing.empty()) o << "\npricing: " << (c.pricing == "rates" ? "rates" : "fitted");
  if (c.pricing != "rates") {
    o << "\nefficiency: ";
    eff(c.eff);
  }
  if (!c.profiles.empty()) o << "\nprofiles:";
  for (const auto& [name, e] : c.profiles) {
    o << "\n  " << name << ": ";
    eff(e);
  }
}

// cluster_to_yaml's `rates` section.
void write_rates(std::ostream& o, const Cluster& c) {
  if (!c.rates.empty()) {
    o << "\n# kernel-level rates: achieved TFLOP/s (attention: causal FLOP count) and "
         "nccl-tests busbw (GB/s) by size\nrates:";
    if (!c.rates.gemm.empty()) o << "\n  gemm:";
    for (const auto& g : c.rates.gemm)
      o << "\n    - {m: " << std::llround(g.m) << ", n: " << std::llround(g.n)
        << ", k: " << std::llround(g.k) << ", tflops: " << g.flops / 1e12 << "}";
    if (!c.rates.attention.empty()) o << "\n  attention:";
    for (const auto& a : c.rates.attention)
      o << "\n    - {head_dim: " << a.head_dim << ", seq: " << std::llround(a.seq)
        << ", fwd_tflops: " << a.fwd_flops / 1e12 << ", bwd_tflops: " << a.bwd_flops / 1e12
        << (a.block == "causal" ? "" : ", block: " + a.block) << "}";
    if (!c.rates.memory.empty()) o << "\n  memory:";
    for (const auto& m : c.rates.memory)
      o << "\n    - {bytes: " << std::llround(m.bytes) << ", gbps: " << m.bw / 1e9 << "}";
    if (c.rates.launch >= 0) o << "\n  launch_us: " << c.rates.launch * 1e6;
    for (const auto* v : {&c.rates.intra, &c.rates.inter}) {
      if (v->empty()) continue;
      o << "\n  " << (v == &c.rates.intra ? "busbw_intra:" : "busbw_inter:");
      for (const auto& b : *v)
        o << "\n    - {bytes: " << std::llround(b.bytes) << ", gbps: " << b.busbw / 1e9 << "}";
    }
  }
}

}  // namespace

std::string cluster_to_yaml(const Cluster& c) {
  std::ostringstream o;
  o.precision(6);
  auto q = [](const std::string& s) {
    std::string r = "\"";
    for (char ch : s) r += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
    return r + "\"";
  };
  o << "# Cluster file for scaletrain-plan (docs/planner.md). Units: GiB, GB/s (1e9 B/s)\n"
    << "# per device and direction, microseconds, TFLOP/s dense per device.\n";
  o << "name: " << q(c.name) << "\ndevice: " << q(c.device) << "\nkind: " << c.kind
    << "\nprecision: " << c.precision << "\npeak_tflops: " << c.peak_flops / 1e12
    << "\nmemory_gib: " << c.memory_bytes / double(1ull << 30)
    << "\nmemory_reserved_gib: " << c.memory_reserved / double(1ull << 30);
  if (c.memory_bandwidth > 0) o << "\nmemory_bandwidth_gbps: " << c.memory_bandwidth / 1e9;
  o << "\ndevices_per_node: " << c.devices_per_node;
  if (c.placement != "block")
    o << "\n# consecutive ranks placed round robin over the nodes\nplacement: " << c.placement;
  if (c.nodes > 0) o << "\nnodes: " << c.nodes;
  if (c.host.cores > 0) o << "\ncores_per_node: " << c.host.cores;
  o << "\nthreads_per_rank: " << c.host.threads;
  o << "\nintra_node: {bandwidth_gbps: " << c.intra.bandwidth / 1e9
    << ", latency_us: " << c.intra.latency * 1e6 << "}";
  o << "\ninter_node: {bandwidth_gbps: " << c.inter.bandwidth / 1e9
    << ", latency_us: " << c.inter.latency * 1e6 << "}";
  write_pricing(o, c);
  if (c.progress != 0 || !c.gpu())
    o << "\n# async: collectives progress beside compute; polls: only while the issuing "
         "thread waits\ncollective_progress: "
      << (c.async_progress() ? "async" : "polls");
  if (c.host.quota.cpus > 0)
    o << "\n# a node's ranks together get cpus x period_us of CPU time per period "
         "(cgroup cpu.max)\ncpu_quota: {cpus: "
      << c.host.quota.cpus << ", period_us: " << c.host.quota.period * 1e6 << "}";
  if (!c.concurrency.empty()) {
    o << "\n# compute slowdown when this many ranks share the node's cores (1 = "
         "alone)\nconcurrency:";
    for (auto& [r, f] : c.concurrency) o << "\n  " << r << ": " << f;
  }
  if (!c.collectives.empty()) {
    o << "\n# measured: time(bytes) = latency + bytes / bandwidth (bytes as nccl-tests' "
         "size),\n# fitted to the points [bytes, seconds] the probe timed; a size is priced "
         "from\n# the points around it\ncollectives:";
    for (const auto& m : c.collectives) {
      o << "\n  - {kind: " << m.kind << ", ranks: " << m.ranks
        << ", latency_us: " << m.fit.latency * 1e6 << ", bandwidth_gbps: " << m.fit.bandwidth / 1e9
        << (m.inter_node < 0 ? ""
            : m.inter_node   ? ", inter_node: true"
                             : ", inter_node: false");
      if (m.per_node > 0) o << ", per_node: " << m.per_node;
      if (m.node_ranks > 0) o << ", node_ranks: " << m.node_ranks;
      if (!m.points.empty()) {
        o << ",\n     points: [";
        for (size_t j = 0; j < m.points.size(); ++j)
          o << (j ? ", " : "") << "[" << static_cast<long long>(std::llround(m.points[j].first))
            << ", " << m.points[j].second << "]";
        o << "]";
      }
      o << "}";
    }
  }
  write_rates(o, c);
  if (!c.op_seconds.empty()) {
    o << "\n# measured seconds per kernel call, one rank alone (ops.hpp keys)\nops:";
    for (auto& [k, v] : c.op_seconds) o << "\n  " << q(k) << ": " << v;
  }
  if (!c.notes.empty()) o << "\nnotes: " << q(c.notes);
  if (!c.meta.empty()) {
    o << "\ncalibrated:";
    for (auto& [k, v] : c.meta) o << "\n  " << k << ": " << q(v);
  }
  o << "\n";
  return o.str();
}

}  // namespace st::plan
