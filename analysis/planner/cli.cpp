// scaletrain-plan command line (see cli.hpp and docs/planner.md).
#include "planner/cli.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"
#include "core/util.hpp"
#include "plan/cluster.hpp"
#include "plan/space.hpp"
#include "planner/calibrate.hpp"
#include "planner/compare.hpp"
#include "planner/gpu_rates.hpp"
#include "planner/mpt_fit.hpp"
#include "planner/published.hpp"
#include "planner/report.hpp"
#include "scaletrain/build_config.hpp"

namespace fs = std::filesystem;

namespace st::plan {
namespace {

const char* kUsage =
    "usage:\n"
    "  scaletrain-plan [plan] --cluster FILE --devices N[,N...] [model] [knobs] [outputs]\n"
    "  scaletrain-plan calibrate [model] [knobs] --out FILE.yaml [calibrate options]\n"
    "  scaletrain-plan compare --cluster FILE RUN_DIR... [--out DIR]\n"
    "  scaletrain-plan mpt-fit [--benchmarks CSV] [--models CSV] [--clusters DIR] [--out DIR]\n"
    "  scaletrain-plan published [--benchmarks CSV] [--models CSV] [--clusters DIR]\n"
    "  scaletrain-plan calibrate-gpu --cluster BASE.yaml --out FILE.yaml [--bench PATH]\n"
    "                [--attn-bench PATH] [--nccl-intra CMD] [--nccl-inter CMD]\n"
    "model (as the trainer takes it):\n"
    "  --config F.yaml          run config or model preset file (default: configs/default.yaml)\n"
    "  --set section.key=value  any config key, repeatable (e.g. model.preset=llama-7b)\n"
    "knobs (comma-separated lists; a knob left out keeps the config's value):\n"
    "  --devices N,...          devices (ranks) to plan for; calibrate: rank counts to measure\n"
    "  --dp, --tp, --pp, --cp   sizes (default: every power of two dividing the device count)\n"
    "  --sp 0,1                 sequence parallelism (tried with tp > 1 only)\n"
    "  --zero 0,1,2,3           ZeRO stages\n"
    "  --chunks 1,2             model chunks per pipeline stage (interleaved when > 1)\n"
    "  --micro-batch B,...      sequences per micro-batch\n"
    "  --grad-accum M,...       micro-batches per step\n"
    "  --global-batch G         fix the global batch (sequences): grad_accum = G / (dp * "
    "micro_batch)\n"
    "  --bucket-mb X,...        gradient bucket sizes (MiB)\n"
    "  --act-ckpt none,selective,full\n"
    "plan outputs:\n"
    "  --cluster FILE           cluster file (configs/clusters/*.yaml)\n"
    "  --devices-per-node N     override the cluster file's devices per node\n"
    "  --top K                  layouts in the table and the campaign (default 10)\n"
    "  --near K                 predicted-infeasible layouts nearest the limit added to the "
    "campaign (default 2)\n"
    "  --out DIR                output folder (default results/plans/plan-<model>-<cluster>-<UTC "
    "time>)\n"
    "  --campaign-name NAME     name in campaign.yaml (default plan-<model>-<devices>)\n"
    "  --campaign-steps N       steps per campaign job (default 20)\n"
    "  --weak-scaling N,...     also project weak scaling over these sizes at the per-device\n"
    "                           batch micro_batch x grad_accum (weak_scaling.md/.csv/.json/.svg)\n"
    "  --no-plots               tables only\n"
    "calibrate options:\n"
    "  --out FILE.yaml          cluster file to write (e.g. configs/clusters/cpu-local.yaml)\n"
    "  --name NAME              cluster name (default cpu-local)\n"
    "  --op-seconds S           timing budget per kernel call shape (default 0.05)\n"
    "  --coll-seconds S         timing budget per collective and size (default 0.2)\n"
    "  --sizes B,...            collective message sizes in bytes (default 4K,64K,1M,4M,16M)\n"
    "  --add-to FILE.yaml       time only the kernel calls FILE lacks (another model's shapes),\n"
    "                           keep its collectives; write the union to --out\n"
    "calibrate-gpu options:\n"
    "  --bench PATH             GEMM benchmark (default scaletrain-bench-gemm on PATH)\n"
    "  --attn-bench PATH        measure rates.attention with it (scaletrain-bench-attention)\n"
    "  --nccl-intra CMD         nccl-tests command inside one node (e.g. 'all_reduce_perf -b 1M\n"
    "                           -e 8G -f 2 -g 8'): its busbw rows become rates.busbw_intra\n"
    "  --nccl-inter CMD         the same across nodes (an mpirun of it): rates.busbw_inter\n"
    "environment: SCALETRAIN_MPIEXEC (launcher for the probe, default mpiexec),\n"
    "  SCALETRAIN_PLAN_PROBE (probe binary, default next to scaletrain-plan), SCALETRAIN_GNUPLOT\n"
    "exit codes: 0 ok, 1 internal error, 2 bad input, 3 no layout predicted to fit (plan.md "
    "lists the nearest)\n";

template <typename T>
std::vector<T> parse_list(const std::string& flag, const std::string& v) {
  std::vector<T> out;
  for (const std::string& s : split(v, ',')) {
    try {
      size_t pos = 0;
      const double d = std::stod(s, &pos);
      if (pos != s.size()) throw std::invalid_argument(s);
      if constexpr (std::is_integral_v<T>) {
        if (d != double(int64_t(d)) || d < 0) throw std::invalid_argument(s);
      }
      if (d < 0) throw std::invalid_argument(s);
      out.push_back(T(d));
    } catch (const std::logic_error&) {
      throw UsageError(flag + ": '" + s + "' in '" + v + "' is not a " +
                       (std::is_integral_v<T> ? "non-negative integer" : "non-negative number") +
                       " (give a comma-separated list, e.g. " + flag + " 1,2,4)");
    }
  }
  if (out.empty()) throw UsageError(flag + ": empty list");
  return out;
}

struct Args {
  std::string cmd = "plan";
  std::string config, cluster, out, name = "cpu-local", campaign_name, benchmarks, models,
                                    clusters_dir, add_to, bench = "scaletrain-bench-gemm",
                                    nccl_intra, nccl_inter, attn_bench;
  std::vector<std::string> sets, positional;
  KnobRanges r;
  bool have[16] = {};
  int top = 10, near = 2, campaign_steps = 20, devices_per_node = 0;
  bool plots = true;
  double op_seconds = 0.05, coll_seconds = 0.2;
  std::vector<long> sizes;
  std::vector<int> weak;
  long global_batch = 0;
};

Args parse(const std::vector<std::string>& args) {
  Args a;
  size_t i = 0;
  if (!args.empty() && args[0].rfind("--", 0) != 0) a.cmd = args[i++];
  if (a.cmd != "plan" && a.cmd != "calibrate" && a.cmd != "compare" && a.cmd != "mpt-fit" &&
      a.cmd != "published" && a.cmd != "calibrate-gpu")
    throw UsageError(
        "unknown command '" + a.cmd +
        "' (valid: plan, calibrate, calibrate-gpu, compare, mpt-fit, published; see --help)");
  for (; i < args.size(); ++i) {
    const std::string& f = args[i];
    if (f.rfind("--", 0) != 0) {
      a.positional.push_back(f);
      continue;
    }
    if (f == "--no-plots") {
      a.plots = false;
      continue;
    }
    if (i + 1 >= args.size()) throw UsageError(f + ": needs a value (see --help)");
    const std::string v = args[++i];
    auto one_int = [&](int lo) {
      const auto l = parse_list<long>(f, v);
      if (l.size() != 1 || l[0] < lo)
        throw UsageError(f + ": expected one integer >= " + std::to_string(lo) + ", got '" + v +
                         "'");
      return l[0];
    };
    auto seconds = [&] {
      const auto l = parse_list<double>(f, v);
      if (l.size() != 1 || l[0] <= 0)
        throw UsageError(f + ": expected one positive number of seconds, got '" + v + "'");
      return l[0];
    };
    if (f == "--config")
      a.config = v;
    else if (f == "--set")
      a.sets.push_back(v);
    else if (f == "--cluster")
      a.cluster = v;
    else if (f == "--out")
      a.out = v;
    else if (f == "--name")
      a.name = v;
    else if (f == "--devices")
      a.r.devices = parse_list<int>(f, v);
    else if (f == "--dp")
      a.r.dp = parse_list<int>(f, v);
    else if (f == "--tp")
      a.r.tp = parse_list<int>(f, v);
    else if (f == "--pp")
      a.r.pp = parse_list<int>(f, v);
    else if (f == "--cp")
      a.r.cp = parse_list<int>(f, v);
    else if (f == "--sp") {
      std::vector<int> sp;
      for (const auto& s : split(v, ',')) {
        if (s == "0" || s == "off" || s == "false")
          sp.push_back(0);
        else if (s == "1" || s == "on" || s == "true")
          sp.push_back(1);
        else
          throw UsageError("--sp: '" + s + "' is not one of 0, 1 (off, on)");
      }
      a.r.sp = sp;
    } else if (f == "--zero") {
      a.r.zero_stage = parse_list<int>(f, v);
      for (int z : a.r.zero_stage)
        if (z > 3) throw UsageError("--zero: " + std::to_string(z) + " is not one of 0,1,2,3");
    } else if (f == "--chunks")
      a.r.num_model_chunks = parse_list<int>(f, v);
    else if (f == "--micro-batch")
      a.r.micro_batch = parse_list<int>(f, v);
    else if (f == "--grad-accum")
      a.r.grad_accum = parse_list<int>(f, v);
    else if (f == "--global-batch")
      a.global_batch = one_int(1);
    else if (f == "--bucket-mb")
      a.r.dp_bucket_mb = parse_list<double>(f, v);
    else if (f == "--act-ckpt") {
      a.r.act_ckpt = split(v, ',');
      for (const auto& s : a.r.act_ckpt)
        if (s != "none" && s != "selective" && s != "full")
          throw UsageError("--act-ckpt: '" + s + "' is not one of none, selective, full");
    } else if (f == "--top")
      a.top = int(one_int(1));
    else if (f == "--near")
      a.near = int(one_int(0));
    else if (f == "--campaign-name")
      a.campaign_name = v;
    else if (f == "--campaign-steps")
      a.campaign_steps = int(one_int(1));
    else if (f == "--weak-scaling")
      a.weak = parse_list<int>(f, v);
    else if (f == "--op-seconds")
      a.op_seconds = seconds();
    else if (f == "--coll-seconds")
      a.coll_seconds = seconds();
    else if (f == "--sizes")
      a.sizes = parse_list<long>(f, v);
    else if (f == "--benchmarks")
      a.benchmarks = v;
    else if (f == "--bench")
      a.bench = v;
    else if (f == "--attn-bench")
      a.attn_bench = v;
    else if (f == "--nccl-intra")
      a.nccl_intra = v;
    else if (f == "--nccl-inter")
      a.nccl_inter = v;
    else if (f == "--models")
      a.models = v;
    else if (f == "--clusters")
      a.clusters_dir = v;
    else if (f == "--devices-per-node")
      a.devices_per_node = int(one_int(1));
    else if (f == "--add-to")
      a.add_to = v;
    else
      throw UsageError("unknown option '" + f + "' (see --help)");
  }
  for (int d : a.r.devices)
    if (d < 1) throw UsageError("--devices: counts must be >= 1");
  for (auto* l : {&a.r.dp, &a.r.tp, &a.r.pp, &a.r.cp, &a.r.num_model_chunks, &a.r.micro_batch,
                  &a.r.grad_accum, &a.weak})
    for (int x : *l)
      if (x < 1) throw UsageError("sizes, chunks, batches and --weak-scaling counts must be >= 1");
  for (double b : a.r.dp_bucket_mb)
    if (b <= 0) throw UsageError("--bucket-mb: sizes must be > 0");
  if (a.cmd != "plan" && a.cmd != "compare" && !a.positional.empty())
    throw UsageError("unexpected argument '" + a.positional[0] + "' (see --help)");
  if (a.cmd == "plan" && !a.positional.empty())
    throw UsageError("unexpected argument '" + a.positional[0] + "' (see --help)");
  return a;
}

Config base_config(const Args& a) {
  std::string cfg = a.config;
  if (cfg.empty()) cfg = std::string(SCALETRAIN_SOURCE_DIR) + "/configs/default.yaml";
  // The planner reads no data, so no data key may refuse a plan (a
  // vocabulary beyond a uint16 token file's, a file that is not here).
  std::vector<std::string> sets = a.sets;
  sets.push_back("data.source=synthetic");
  return load_config(cfg, sets);
}

// Knob ranges: the flags, else the config's own values.
KnobRanges ranges_from(const Args& a, const Config& base, const std::vector<int>& devices) {
  KnobRanges r = default_ranges(base, devices);
  r.dp = a.r.dp, r.tp = a.r.tp, r.pp = a.r.pp, r.cp = a.r.cp;
  if (!a.r.sp.empty()) r.sp = a.r.sp;
  if (!a.r.zero_stage.empty()) r.zero_stage = a.r.zero_stage;
  if (!a.r.num_model_chunks.empty()) r.num_model_chunks = a.r.num_model_chunks;
  if (!a.r.micro_batch.empty()) r.micro_batch = a.r.micro_batch;
  if (!a.r.grad_accum.empty()) r.grad_accum = a.r.grad_accum;
  if (!a.r.dp_bucket_mb.empty()) r.dp_bucket_mb = a.r.dp_bucket_mb;
  if (!a.r.act_ckpt.empty()) r.act_ckpt = a.r.act_ckpt;
  r.global_batch = a.global_batch;
  return r;
}

std::string joined(const std::vector<std::string>& args) {
  std::string s = "scaletrain-plan";
  for (const auto& x : args) s += " " + (x.find(' ') == std::string::npos ? x : "'" + x + "'");
  return s;
}

int run_plan(const Args& a, const std::vector<std::string>& argv, std::ostream& out) {
  if (a.cluster.empty()) throw UsageError("plan: give --cluster FILE (configs/clusters/*.yaml)");
  if (a.r.devices.empty() && a.weak.empty())
    throw UsageError("plan: give --devices N[,N...] (or --weak-scaling N,...)");
  Cluster cl = load_cluster(a.cluster);
  if (a.devices_per_node > 0) cl.devices_per_node = a.devices_per_node;
  const Config base = base_config(a);
  ReportOptions o;
  o.top = a.top;
  o.near = a.near;
  o.plots = a.plots;
  o.campaign_name = a.campaign_name;
  o.campaign_steps = a.campaign_steps;
  o.command = joined(argv);
  o.out_dir = !a.out.empty() ? a.out
                             : "results/plans/plan-" + base.model.name + "-" + cl.name + "-" +
                                   timestamp_compact();
  std::vector<Candidate> cands;
  if (!a.r.devices.empty()) cands = plan_space(base, ranges_from(a, base, a.r.devices), cl);
  if (!a.weak.empty()) {
    // Weak scaling: the per-device batch of the base (or first given) micro-batch x grad_accum.
    const KnobRanges r0 = ranges_from(a, base, {});
    const long per_device = long(r0.micro_batch.front()) * r0.grad_accum.front();
    std::vector<Candidate> weak;
    for (int n : a.weak) {
      KnobRanges r = ranges_from(a, base, {n});
      r.global_batch = per_device * n;
      auto c = plan_space(base, r, cl);
      weak.insert(weak.end(), c.begin(), c.end());
    }
    ReportOptions wo = o;
    write_weak_scaling(weak, a.weak, cl, wo, out);
    if (cands.empty()) return 0;
  }
  // Nothing fits: the plan is written (with the nearest layouts), and the
  // status says so.
  return write_plan(cands, base, cl, o, out) > 0 ? 0 : 3;
}

}  // namespace

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    if (args.empty()) {
      err << kUsage;
      return 2;
    }
    if (args[0] == "-h" || args[0] == "--help" ||
        (args.size() == 2 && (args[1] == "-h" || args[1] == "--help"))) {
      out << kUsage;
      return 0;
    }
    const Args a = parse(args);
    if (a.cmd == "plan") return run_plan(a, args, out);
    if (a.cmd == "calibrate") {
      CalibrateOptions o;
      o.base = base_config(a);
      std::vector<int> ranks = a.r.devices.empty() ? std::vector<int>{1, 2, 4} : a.r.devices;
      o.ranges = ranges_from(a, o.base, ranks);
      o.out = a.out;
      o.name = a.name;
      o.op_seconds = a.op_seconds;
      o.coll_seconds = a.coll_seconds;
      if (!a.sizes.empty()) o.sizes = a.sizes;
      o.command = joined(args);
      o.add_to = a.add_to;
      return calibrate(o, out);
    }
    if (a.cmd == "calibrate-gpu") {
      if (a.cluster.empty() || a.out.empty())
        throw UsageError(
            "calibrate-gpu: give --cluster BASE.yaml (a kind: gpu file) and --out FILE");
      calibrate_gpu(a.cluster, a.out, a.bench, joined(args), out, a.nccl_intra, a.nccl_inter,
                    a.attn_bench);
      return 0;
    }
    if (a.cmd == "compare") {
      if (a.cluster.empty()) throw UsageError("compare: give --cluster FILE");
      if (a.positional.empty()) throw UsageError("compare: give one or more run folders");
      const Cluster cl = load_cluster(a.cluster);
      const auto rows = compare_runs(a.positional, cl);
      const std::string dir =
          !a.out.empty() ? a.out : (fs::path(a.positional[0]).parent_path() / "compare").string();
      write_compare(rows, cl, dir, out);
      out << "written: " << dir << "/compare.md, compare.csv, compare.json\n";
      return 0;
    }
    const std::string src = SCALETRAIN_SOURCE_DIR;
    const std::string cdir = !a.clusters_dir.empty() ? a.clusters_dir : src + "/configs/clusters";
    if (a.cmd == "published") {
      const auto rows = read_published(
          !a.benchmarks.empty() ? a.benchmarks : src + "/analysis/reference/torchtitan_llama3.csv",
          !a.models.empty() ? a.models : src + "/analysis/reference/torchtitan_llama3_models.csv");
      write_published(predict_published(rows, cdir), out);
      return 0;
    }
    // mpt-fit
    const std::string bench =
        !a.benchmarks.empty() ? a.benchmarks : src + "/analysis/reference/mpt_benchmarks.csv";
    const std::string models =
        !a.models.empty() ? a.models : src + "/analysis/reference/mpt_models.csv";
    const auto rows = read_mpt_rows(bench, models);
    const auto groups = mpt_fit(rows, {{"h100_80gb", cdir + "/h100-sxm-80gb.yaml"},
                                       {"a100_80gb", cdir + "/a100-sxm-80gb.yaml"},
                                       {"a100_40gb", cdir + "/a100-sxm-40gb.yaml"}});
    write_mpt_fit(groups, a.out, out);
    return 0;
  } catch (const UsageError& e) {
    err << "scaletrain-plan: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "scaletrain-plan: internal error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace st::plan
