// Implementation of calibrate.hpp.
#include "planner/calibrate.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "core/host.hpp"
#include "core/util.hpp"
#include "plan/ops.hpp"
#include "plan/recorded_step.hpp"
#include "planner/op_runner.hpp"

namespace fs = std::filesystem;

namespace st::plan {
namespace {

std::string probe_path() {
  if (auto e = env("SCALETRAIN_PLAN_PROBE"); e && !e->empty()) return *e;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path() / "scaletrain-plan-probe").string();
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// Runs the probe at `ranks` and returns its stdout; UsageError with its output on failure.
std::string run_probe(int ranks, const std::string& args, std::ostream& log,
                      const std::string& mpiexec) {
  const std::string probe = probe_path();
  std::error_code ec;
  if (!fs::exists(probe, ec))
    throw UsageError("calibrate: the MPI probe '" + probe +
                     "' is missing (build the scaletrain-plan-probe target, or set "
                     "SCALETRAIN_PLAN_PROBE)");
  std::string cmd =
      (::getuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "") +
      std::string("OMPI_MCA_rmaps_base_oversubscribe=1 ") + mpiexec +
      " --oversubscribe --bind-to none -n " + std::to_string(ranks) + " " + shell_quote(probe) +
      " " + args + " 2>&1";
  log << "calibrate: " << cmd << "\n" << std::flush;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw Error("calibrate: cannot start '" + cmd + "'");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0)
    throw UsageError("calibrate: the MPI probe failed at " + std::to_string(ranks) +
                     " ranks (exit status " + std::to_string(rc) +
                     "; set SCALETRAIN_MPIEXEC / SCALETRAIN_MPIEXEC_NODE "
                     "to your launcher):\n" +
                     out);
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "cpu";
}

double mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (f >> key) {
    if (key == "MemTotal:") {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace

Link fit_alpha_beta(const std::vector<std::pair<double, double>>& pts) {
  // Minimise sum ((a + b x - t) / t)^2 over a >= 0, b >= 0.
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (auto [x, t] : pts) {
    const double w = 1 / (t * t);
    s00 += w, s01 += w * x, s11 += w * x * x, r0 += w * t, r1 += w * x * t;
  }
  const double det = s00 * s11 - s01 * s01;
  double a = det != 0 ? (r0 * s11 - r1 * s01) / det : 0;
  double b = det != 0 ? (s00 * r1 - s01 * r0) / det : 0;
  if (a < 0) {  // refit through the origin
    a = 0;
    b = s11 > 0 ? r1 / s11 : 0;
  }
  if (b <= 0) {  // flat: latency only (a bandwidth too high to matter)
    b = 1e-12;
    a = s00 > 0 ? r0 / s00 : 0;
  }
  return {1 / b, a};
}

namespace {

// The most ranks of the rank counts to measure (1 at least).
int most_ranks(const KnobRanges& r) {
  int max_ranks = 1;
  for (int n : r.devices) max_ranks = std::max(max_ranks, n);
  return max_ranks;
}

// Every op the layouts of the ranges would call, per rank count, by key;
// UsageError when no layout of the ranges is valid.
std::map<std::string, Op> layout_ops(const CalibrateOptions& o, std::ostream& log) {
  std::map<std::string, Op> ops;
  int valid = 0;
  for (const Candidate& c : enumerate_layouts(o.base, o.ranges, "cpu")) {
    if (!c.reason.empty()) continue;
    ++valid;
    for (const Op& op : step_ops(c.cfg)) ops.emplace(op.key(), op);  // the recorded step
  }
  if (valid == 0)
    throw UsageError(
        "calibrate: no valid layout in the given ranges for the model (every one "
        "breaks a divisibility rule); widen --devices / --tp / --cp ...");
  log << "calibrate: " << valid << " layouts, " << ops.size() << " distinct kernel calls to time\n"
      << std::flush;
  return ops;
}

// --add-to: times the kernel calls the given cluster file lacks and writes
// it, with them, to --out.
int add_to_cluster(const CalibrateOptions& o, const std::map<std::string, Op>& ops,
                   std::ostream& log) {
  Cluster c = load_cluster(o.add_to);
  if (c.gpu())
    throw UsageError("calibrate --add-to " + o.add_to + ": not a kind: cpu cluster file");
  size_t added = 0;
  for (const auto& [key, op] : ops)
    if (!c.op_seconds.count(key)) {
      c.op_seconds[key] = time_op(op, o.op_seconds);
      ++added;
    }
  c.meta["command_add_" + std::to_string(c.meta.size())] = o.command;
  write_file_atomic(o.out, cluster_to_yaml(c));
  log << "calibrate: added " << added << " kernel calls to " << o.add_to << ", wrote " << o.out
      << "\n";
  return 0;
}

// A CPU cluster file describing this machine: its CPU, threads, cores,
// memory per rank at the most ranks, and the measured sgemm peak.
Cluster this_machine(const CalibrateOptions& o) {
  Cluster c;
  c.name = o.name;
  c.kind = "cpu";
  c.precision = "fp32";
  c.device = "cpu: " + cpu_model();
  // The host as the trainer reads its own (core/host.hpp): cores, the
  // threads this calibration runs, a cgroup CPU quota.
  c.host = read_host_share(1, omp_get_max_threads());
  c.host.bound = 0;  // one rank's mask is no fact of the node
  const int max_ranks = most_ranks(o.ranges);
  c.devices_per_node = max_ranks;
  c.memory_bytes = mem_total_bytes() / max_ranks;
  c.memory_reserved = 0;
  Op g;
  g.kind = OpKind::Gemm;
  g.s[0] = g.s[1] = g.s[2] = 768;
  // The trainer's convention (app/cpu_peak.cpp): the fastest of the
  // repetitions of 1 s of 768^3 sgemm, so a run's measured peak compares.
  c.peak_flops = g.flops() / time_op(g, 1.0, true);
  c.peak_source = "measured sgemm 768^3 by calibrate (fastest repetition)";
  return c;
}

// Times every kernel call into c.op_seconds: under a CPU quota (`quota`
// CPUs, 0 for none) at its CPU time over the quota, never below its wall time.
void time_kernel_calls(const std::map<std::string, Op>& ops, double op_seconds, double quota,
                       Cluster& c, std::ostream& log) {
  size_t done = 0;
  for (const auto& [key, op] : ops) {
    double cpu = 0;
    const double wall = time_op(op, op_seconds, false, &cpu);
    c.op_seconds[key] = quota > 0 ? std::max(wall, cpu / quota) : wall;
    if (++done % 50 == 0)
      log << "calibrate: timed " << done << "/" << ops.size() << "\n" << std::flush;
  }
}

// Measures the sustained/burst slowdown (the check on the quota's pricing)
// and records it, and how the quota priced the calls, in c.meta.
void record_slowdown(const CpuQuota& cq, Cluster& c, std::ostream& log) {
  const double quota = cq.cpus;
  const std::string& quota_file = cq.where;
  const double slow = sustained_slowdown(2.0);
  std::ostringstream q;
  q << slow;
  c.meta["sustained_slowdown"] =
      q.str() + " (a 256^3 sgemm back to back for 2 s against 5 ms bursts after 250 ms idle)";
  if (quota > 0) {
    std::ostringstream v;
    v << quota << " CPU (" << quota_file << "): kernel calls priced at CPU time / " << quota
      << (c.async_progress()
              ? ", collectives timed beside a computing thread (probe --busy 1)"
              : ", collectives timed alone (collective_progress polls: they run while the "
                "rank's thread waits, not beside its compute)");
    c.meta["cpu_quota"] = v.str();
  }
  log << "calibrate: sustained/burst speed " << slow << ", CPU quota "
      << (quota > 0 ? std::to_string(quota) + " (" + quota_file + ")" : std::string("none"))
      << "\n";
}

// The compute mix of one block (one rank's step of the base model, no
// parallelism, the optimizer left out) as the probe's --ops keys, for the
// slowdown under shared cores.
std::string block_mix_keys(const Config& base) {
  Config b = base;
  b.parallel.tp = b.parallel.pp = b.parallel.cp = 1;
  b.parallel.sp = false;
  b.parallel.dp = 1;  // one rank's step
  b.parallel.zero_stage = 0;
  b.train.grad_accum = 1;
  std::string mix_keys;
  for (const Op& op : step_ops(b))
    if (op.kind != OpKind::Adam) mix_keys += (mix_keys.empty() ? "" : ";") + op.key();
  return mix_keys;
}

// One way of launching the probe.
struct Launch {
  std::string mpiexec;
  int inter;         // MeasuredCollective::inter_node
  bool ops;          // measures the slowdown of shared cores
  int per_node = 1;  // ranks this launcher places on a node
  std::string groups = "world";
};

// Launchers: SCALETRAIN_MPIEXEC (default mpiexec); with
// SCALETRAIN_MPIEXEC_NODE as well, the first is taken to place one rank per
// node (its collectives are inter_node) and the second every rank on one
// node (collectives inside a node, and the slowdown of ranks sharing it;
// rank counts up to the node's cores). SCALETRAIN_MPIEXEC_PAIRS, when set,
// places two ranks on each node: at twice each rank count R of --devices
// (R >= 2 nodes) it times the world as one group (2 members per node) and
// as two groups of R at once, one member per node each (the probe's
// --groups node-local), the shapes a layout's groups take when two of
// its ranks share a node, in blocks and round robin.
std::vector<Launch> probe_launches() {
  const std::string across = env("SCALETRAIN_MPIEXEC").value_or("mpiexec");
  const std::string on_node = env("SCALETRAIN_MPIEXEC_NODE").value_or("");
  const std::string pairs = env("SCALETRAIN_MPIEXEC_PAIRS").value_or("");
  std::vector<Launch> launches;
  if (on_node.empty())
    launches.push_back({across, -1, true});
  else
    launches = {{across, 1, false}, {on_node, 0, true}};
  if (!pairs.empty())
    for (const char* g : {"world", "node-local"}) launches.push_back({pairs, 1, false, 2, g});
  return launches;
}

// The probe's measured points: (kind, ranks, inter_node, per_node,
// node_ranks) -> (bytes, seconds).
using ProbePoints =
    std::map<std::tuple<std::string, int, int, int, int>, std::vector<std::pair<double, double>>>;

// The probe's arguments for launch `l`: the sizes (`sizes`, comma-joined),
// the window, and --busy, --groups and --ops (`mix_keys`) as they apply.
std::string probe_args(const CalibrateOptions& o, const Launch& l, double quota,
                       bool async_progress, const std::string& sizes, const std::string& mix_keys) {
  std::ostringstream args;
  // Each size is timed back to back over the window (the probe's
  // timed()); under a quota over ten of its 100 ms periods at least, so
  // that the collective pays the quota as the step's reduction does.
  args << "--sizes " << sizes << " --seconds "
       << (quota > 0 ? std::max(o.coll_seconds, 1.0) : o.coll_seconds);
  // Under a CPU quota, collectives that progress on their own
  // (collective_progress async) are timed beside a computing thread: a
  // step's gradient reductions run while its backward keeps the node's
  // quota spent (see the probe's --busy). Those that progress only
  // while the rank's thread waits (polls, the CPU device's MPI) run when
  // it has stopped computing: timed alone.
  if (quota > 0 && async_progress) args << " --busy 1";
  if (l.groups != "world") args << " --groups " << l.groups;
  if (l.ops) args << " --ops " << shell_quote(mix_keys);
  return args.str();
}

// Reads the probe's output: its `coll` lines into `pts`, its `compute`
// lines (the slowdown of shared cores) into c.concurrency.
void read_probe_output(const std::string& text, const Launch& l, ProbePoints& pts, Cluster& c) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    if (tag == "coll") {
      std::string kind;
      int n = 0, per_node = 0, node_ranks = 0;
      double bytes = 0, sec = 0;
      if (!(ls >> kind >> n >> bytes >> sec)) continue;
      ls >> per_node >> node_ranks;  // the group's shape on the nodes
      // Where the launcher's placement is not known, neither is the shape.
      if (l.inter < 0) per_node = node_ranks = 0;
      pts[{kind, n, l.inter, per_node, node_ranks}].push_back({bytes, sec});
    } else if (tag == "compute") {
      int n = 0;
      double sec = 0;
      if (ls >> n >> sec) c.concurrency[n] = sec;  // the probe's ratio, measured back to back
    }
  }
}

// Runs the probe with every launcher at every rank count it applies to and
// returns the collectives' points; the slowdowns go to c.concurrency.
ProbePoints run_probes(const CalibrateOptions& o, double quota, Cluster& c, std::ostream& log) {
  const std::string mix_keys = block_mix_keys(o.base);
  c.concurrency[1] = 1.0;
  std::string sizes;
  for (long s : o.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  ProbePoints pts;
  for (const Launch& l : probe_launches())
    for (int nodes_or_ranks : o.ranges.devices) {
      // Pairs: two ranks on each of R nodes (R >= 2). On one node: up to its
      // cores (more ranks than cores is no layout).
      const int r = nodes_or_ranks * l.per_node;
      if (r < 2 || (l.per_node > 1 && nodes_or_ranks < 2) || (l.inter == 0 && r > c.host.cores))
        continue;
      const std::string args = probe_args(o, l, quota, c.async_progress(), sizes, mix_keys);
      read_probe_output(run_probe(r, args, log, l.mpiexec), l, pts, c);
    }
  return pts;
}

// One MeasuredCollective per measured shape: the latency + bandwidth fit of
// its points and the mean time at each size.
void fit_collectives(const ProbePoints& pts, Cluster& c) {
  for (const auto& [key, p] : pts) {
    MeasuredCollective m;
    m.kind = std::get<0>(key);
    m.ranks = std::get<1>(key);
    m.inter_node = std::get<2>(key);
    m.per_node = std::get<3>(key);
    m.node_ranks = std::get<4>(key);
    m.fit = fit_alpha_beta(p);
    // The points themselves price the sizes between them (MeasuredCollective::seconds).
    std::map<double, std::pair<double, int>> by_size;  // bytes -> (sum of seconds, count)
    for (const auto& [b, t] : p) by_size[b].first += t, by_size[b].second += 1;
    for (const auto& [b, st] : by_size) m.points.push_back({b, st.first / st.second});
    c.collectives.push_back(m);
  }
}

// Links: the point-to-point fit at the smallest rank count measured, on
// each side of the node boundary.
void choose_links(Cluster& c) {
  for (const auto& m : c.collectives) {
    // a link alone: not one shared with another group's pairs
    if (m.kind != "p2p" || (m.inter_node == 1 && m.node_ranks > m.per_node)) continue;
    if (m.inter_node != 1 && (c.intra.bandwidth == 0 || m.ranks == 2)) c.intra = m.fit;
    if (m.inter_node != 0 && (c.inter.bandwidth == 0 || m.ranks == 2)) c.inter = m.fit;
  }
  if (c.intra.bandwidth == 0) c.intra = c.inter;
  if (c.intra.bandwidth == 0) c.intra = {10e9, 1e-6};  // one rank only: nothing measured
  if (c.inter.bandwidth == 0) c.inter = c.intra;
}

// What the file records of its making: the notes, and in c.meta the date,
// host, command, model and load average.
void record_provenance(const CalibrateOptions& o, Cluster& c) {
  c.notes = "measured by scaletrain-plan calibrate; one node, " + std::to_string(c.host.cores) +
            " cores, ranks " + std::to_string(most_ranks(o.ranges)) + " at most";
  c.meta["date"] = iso_time_utc();
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  c.meta["host"] = host;
  c.meta["command"] = o.command;
  c.meta["model"] = o.base.model.name + " (d_model " + std::to_string(o.base.model.d_model) +
                    ", seq_len " + std::to_string(o.base.model.seq_len) + ")";
  std::ifstream la("/proc/loadavg");
  std::string l1, l5, l15;
  la >> l1 >> l5 >> l15;
  c.meta["load_average"] = l1 + " " + l5 + " " + l15;
}

}  // namespace

int calibrate(const CalibrateOptions& o, std::ostream& log) {
  if (o.out.empty())
    throw UsageError("calibrate: give --out FILE.yaml (the cluster file to write)");
  const std::map<std::string, Op> ops = layout_ops(o, log);
  if (!o.add_to.empty()) return add_to_cluster(o, ops, log);
  Cluster c = this_machine(o);
  // Under a cgroup CPU quota (an emulated node of scripts/emucluster.sh, a
  // container's CPU limit) a call shorter than the quota's share of a 100 ms
  // period runs at full speed, while a whole step runs at the quota: each
  // call is priced at its CPU time over the quota (never below its wall
  // time), and the slowdown a back-to-back loop measures is recorded beside
  // it as the check.
  const CpuQuota cq = c.host.quota;
  time_kernel_calls(ops, o.op_seconds, cq.cpus, c, log);
  record_slowdown(cq, c, log);
  fit_collectives(run_probes(o, cq.cpus, c, log), c);
  choose_links(c);
  record_provenance(o, c);
  const std::string yaml = cluster_to_yaml(c);
  std::error_code ec;
  if (fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path(), ec);
  write_file_atomic(o.out, yaml);
  log << "calibrate: wrote " << o.out << " (" << c.op_seconds.size() << " ops, "
      << c.collectives.size() << " collective fits, sgemm " << c.peak_flops / 1e9 << " GFLOP/s)\n";
  return 0;
}

}  // namespace st::plan
