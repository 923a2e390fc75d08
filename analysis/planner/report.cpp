// Implementation of report.hpp.
#include "planner/report.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyze/plots.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "planner/summary.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st::plan {
namespace {

std::string fx(double v, int p) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(p);
  o << v;
  return o.str();
}
std::string gib(double b) { return fx(b / double(1ull << 30), 2); }
std::string ms(double s) { return fx(s * 1e3, 1); }
json mem_json(const MemoryEstimate& m) {
  return {{"total", m.peak.total()},
          {"weights", m.peak.weights},
          {"grads", m.peak.grads},
          {"optim", m.peak.optim},
          {"activations", m.peak.activations},
          {"buffers", m.peak.buffers},
          {"workspace", m.peak.workspace},
          {"peak_at", m.peak_at},
          {"stage", m.stage}};
}
json time_json(const StepPrediction& t) {
  json j = {{"step", t.step},
            {"gemm", t.gemm},
            {"attention", t.attention},
            {"attention_flops", t.attention_flops},
            {"elementwise", t.elementwise},
            {"recompute", t.recompute},
            {"bubble", t.bubble},
            {"imbalance", t.imbalance},
            {"optimizer", t.optimizer},
            {"tokens_per_s", t.tokens_per_s},
            {"tokens_per_s_device", t.tokens_per_s_device},
            {"mfu", t.mfu},
            {"hfu", t.hfu}};
  for (CommPart p : kAllCommParts)
    j[comm_part_name(p)] = {{"total", t.part(p).total}, {"exposed", t.part(p).exposed}};
  return j;
}
json cand_json(const Candidate& c, int rank) {
  const auto& p = c.cfg.parallel;
  json j = {{"rank", rank},
            {"name", c.name()},
            {"devices", c.devices},
            {"dp", p.dp},
            {"tp", p.tp},
            {"pp", p.pp},
            {"cp", p.cp},
            {"sp", p.sp},
            {"zero_stage", p.zero_stage},
            {"num_model_chunks", p.num_model_chunks},
            {"dp_bucket_mb", p.dp_bucket_mb},
            {"micro_batch", c.cfg.train.micro_batch},
            {"grad_accum", c.cfg.train.grad_accum},
            {"act_ckpt", c.cfg.train.act_ckpt},
            {"pipeline_split", c.split},
            {"pipeline_layers", p.pipeline_layers},
            {"chunk_layers", c.chunk_layers()},
            {"feasible", c.feasible},
            {"reason", c.reason},
            {"runs_on_this_trainer", c.not_runnable.empty()},
            {"not_runnable", c.not_runnable}};
  if (c.timed) {
    j["memory"] = mem_json(c.mem);
    j["available_bytes"] = c.available;
    j["margin_bytes"] = c.margin();
    j["time"] = time_json(c.time);
  }
  return j;
}

std::string time_parts(const StepPrediction& t) {
  std::ostringstream o;
  o << "gemm " << ms(t.gemm) << ", attn " << ms(t.attention);
  // Attention's FLOPs as priced and the rate they ran at (launches in).
  if (t.attention > 0 && t.attention_flops > 0) {
    std::ostringstream a;
    a.precision(3);
    a << " (" << t.attention_flops / 1e15 << " PFLOP at " << t.attention_flops / t.attention / 1e12
      << " TFLOP/s)";
    o << a.str();
  }
  o << ", elem " << ms(t.elementwise);
  if (t.recompute > 0) o << " (recompute " << ms(t.recompute) << ")";
  if (t.bubble > 0) o << ", bubble " << ms(t.bubble);
  if (t.imbalance > 0) o << ", first/last-stage imbalance " << ms(t.imbalance);
  for (CommPart p : kAllCommParts)
    if (t.part(p).total > 0)
      o << ", " << comm_part_name(p) << " " << ms(t.part(p).exposed) << "/" << ms(t.part(p).total);
  o << ", optim " << ms(t.optimizer);
  return o.str();
}
// The pipeline split as shown: "–" without a pipeline, else its kind and
// the layers of each chunk ("ends 7,8*14,7").
std::string split_text(const Candidate& c) {
  if (c.cfg.parallel.pp == 1) return "–";
  return c.split + " " + c.chunk_layers();
}
std::string mem_parts(const MemoryEstimate& m) {
  return "w " + gib(m.peak.weights) + ", g " + gib(m.peak.grads) + ", o " + gib(m.peak.optim) +
         ", act " + gib(m.peak.activations) + ", buf " + gib(m.peak.buffers) + ", ws " +
         gib(m.peak.workspace);
}

// The plots: predicted throughput against predicted peak memory, and the
// frontier (best throughput within each memory budget).
void plots(const std::vector<Candidate>& cands, const Cluster& cl, const std::string& dir,
           std::ostream& out) {
  analysis::Plot a{"throughput_vs_memory",
                   "Predicted tokens/s per device against predicted peak memory per device", "",
                   ""};
  std::ostringstream d;
  d << "# peak_gib tok_s_device feasible\n";
  std::vector<std::pair<double, double>> pts;
  for (const Candidate& c : cands) {
    if (!c.timed) continue;
    d << c.mem.peak.total() / double(1ull << 30) << ' ' << c.time.tokens_per_s_device << ' '
      << (c.feasible ? 1 : 0) << '\n';
    if (c.feasible) pts.push_back({c.mem.peak.total(), c.time.tokens_per_s_device});
  }
  a.data = d.str();
  const double limit = (cl.memory_bytes - cl.memory_reserved) / double(1ull << 30);
  a.script =
      "set xlabel 'predicted peak memory per device (GiB)'\nset ylabel 'predicted tokens/s per "
      "device'\nset yrange [0:*]\nset xrange [0:*]\n"
      "set key top left\nset arrow from " +
      fx(limit, 3) + ", graph 0 to " + fx(limit, 3) +
      ", graph 1 nohead dt 2 lc rgb 'black'\n"
      "plot 'throughput_vs_memory.dat' u ($3>0?$1:1/0):2 w p pt 7 lc rgb '#1f77b4' t 'feasible', "
      "\\\n"
      "  '' u ($3>0?1/0:$1):2 w p pt 6 lc rgb '#d62728' t 'over the memory limit'\n";
  analysis::Plot f{"feasibility_frontier",
                   "Best predicted tokens/s per device within a memory budget", "", ""};
  std::sort(pts.begin(), pts.end());
  std::ostringstream fd;
  fd << "# budget_gib best_tok_s_device\n";
  double best = 0;
  for (auto [m, t] : pts) {
    best = std::max(best, t);
    fd << m / double(1ull << 30) << ' ' << best << '\n';
  }
  f.data = fd.str();
  f.script =
      "set xlabel 'memory budget per device (GiB)'\nset ylabel 'best predicted tokens/s per "
      "device'\nset yrange [0:*]\nset xrange [0:*]\n"
      "set key bottom right\nplot 'feasibility_frontier.dat' u 1:2 w steps lw 2 lc rgb '#1f77b4' t "
      "'frontier'\n";
  const std::string gp = analysis::find_gnuplot();
  for (const auto& p : {a, f}) {
    const std::string why = analysis::render_plot(dir, p, gp);
    if (!why.empty()) out << "plot " << p.name << ".svg not made: " << why << "\n";
  }
}

// The preset a campaign can name and the model keys that differ from it.
std::pair<std::string, std::vector<std::string>> preset_and_overrides(const Config& base) {
  const std::string preset = !base.model.preset.empty() ? base.model.preset : base.model.name;
  Config pc;
  try {
    pc = load_config("", {"model.preset=" + preset});
  } catch (const UsageError&) {
    throw UsageError("campaign: the model '" + preset +
                     "' is not a preset in configs/models/ (mfu_sweep.sh names models by "
                     "preset); plan with --set model.preset=NAME");
  }
  std::vector<std::string> sets;
  const auto& a = base.model;
  const auto& b = pc.model;
  auto add = [&](const char* k, double x, double y) {
    if (x != y) {
      std::ostringstream o;
      o << "model." << k << "=" << x;
      sets.push_back(o.str());
    }
  };
  add("n_layers", a.n_layers, b.n_layers);
  add("d_model", a.d_model, b.d_model);
  add("n_heads", a.n_heads, b.n_heads);
  add("n_kv_heads", a.n_kv_heads, b.n_kv_heads);
  add("ffn_hidden", a.ffn_hidden, b.ffn_hidden);
  add("vocab_size", a.vocab_size, b.vocab_size);
  return {preset, sets};
}

}  // namespace

std::string campaign_yaml(const std::vector<const Candidate*>& layouts, const Config& base,
                          const Cluster& cl, const std::string& name, int steps) {
  const auto [preset, model_sets] = preset_and_overrides(base);
  std::ostringstream o;
  o << "# Written by scaletrain-plan (docs/planner.md): the top layouts of the plan and the\n"
    << "# predicted-infeasible ones nearest the memory limit. Run it with\n"
    << "#   slurm/campaigns/mfu_sweep.sh --campaign <this file>\n"
    << "# then compare: scaletrain-plan compare --cluster " << cl.path
    << " results/<campaign>/runs/*\n"
    << "name: " << name << "\nsteps: " << steps << "\nmicro_batch: " << base.train.micro_batch
    << "\ngrad_accum: " << base.train.grad_accum << "\nmodels: [" << preset << "]\nseq_lens: ["
    << base.model.seq_len << "]\n";
  // The ranks' placement the plan priced; mfu_sweep.sh launches the runs so
  // (scaletrain.sbatch's SCALETRAIN_PLACEMENT).
  if (cl.placement != "block") o << "placement: " << cl.placement << "\n";
  std::vector<std::string> common = model_sets;
  if (!cl.gpu()) {
    common.push_back("runtime.threads=" + std::to_string(cl.host.threads));
    std::ostringstream pk;
    pk << "runtime.cpu_peak_gflops=" << cl.peak_flops / 1e9;  // MFU against the plan's peak
    common.push_back(pk.str());
  }
  if (!common.empty()) {
    o << "set: [";
    for (size_t i = 0; i < common.size(); ++i) o << (i ? ", " : "") << common[i];
    o << "]\n";
  }
  o << "layouts:\n";
  for (const Candidate* c : layouts) {
    const auto& p = c->cfg.parallel;
    const int nodes = (c->devices + cl.devices_per_node - 1) / cl.devices_per_node;
    o << "  - name: " << c->name() << (c->feasible ? "" : "-predicted-oom")
      << "\n    nodes: " << nodes << "\n    ranks_per_node: " << c->devices / nodes
      << "\n    set: [parallel.dp=" << p.dp << ", parallel.tp=" << p.tp << ", parallel.pp=" << p.pp
      << ", parallel.cp=" << p.cp << ", parallel.sp=" << (p.sp ? "true" : "false")
      << ", parallel.zero_stage=" << p.zero_stage
      << ", parallel.num_model_chunks=" << p.num_model_chunks
      << ", parallel.dp_bucket_mb=" << p.dp_bucket_mb
      << ", train.micro_batch=" << c->cfg.train.micro_batch
      << ", train.grad_accum=" << c->cfg.train.grad_accum
      << ", train.act_ckpt=" << c->cfg.train.act_ckpt
      << (p.pipeline_layers.empty() ? ""
                                    : ", \"parallel.pipeline_layers=" + p.pipeline_layers + "\"")
      << "]\n";
  }
  return o.str();
}

namespace {

// plan.md's head: the command, date, model, cluster and layout counts, how
// to read the tables, and the ranked table's header.
void plan_md_head(std::ostream& md, const std::vector<Candidate>& cands, const Config& base,
                  const Cluster& cl, const ReportOptions& o, const PlanSummary& sum) {
  md << "# Plan: " << base.model.name << " on " << cl.name << "\n\n"
     << "| | |\n|---|---|\n| command | `" << o.command << "` |\n| date | " << iso_time_utc()
     << " |\n| model | " << base.model.name << ": " << base.model.n_layers << " layers, d_model "
     << base.model.d_model << ", " << base.model.n_heads << " heads (" << base.model.n_kv_heads
     << " kv), ffn " << base.model.ffn_hidden << ", vocab " << base.model.vocab_size << ", seq_len "
     << base.model.seq_len << " |\n| cluster | `" << cl.path << "`: " << cl.device << ", "
     << gib(cl.memory_bytes) << " GiB (" << gib(cl.memory_reserved) << " reserved), "
     << cl.devices_per_node << " per node"
     << (cl.placement == "block" ? "" : " (ranks " + cl.placement + " over the nodes)") << ", peak "
     << fx(cl.peak_flops / 1e12, 3) << " TFLOP/s (" << cl.peak_source << ") |\n| layouts | "
     << cands.size() << ": " << sum.feasible << " predicted feasible, " << sum.over
     << " over the memory limit, " << sum.invalid << " invalid |\n\n";
  md << "Memory is the worst pipeline stage's peak per device (w weights, g gradients, o "
        "optimizer state, act activations, buf communication buffers, ws workspace), in GiB. "
        "Time parts are per step; communication as exposed/total ms. Both come from step 1 of "
        "the layout run by the trainer's own engine on the recording backend (the first rank of "
        "every stage), priced on the cluster file.\n\n";
  md << "Ranked within each device count (--top per count). Pipeline split: the layers of each "
        "model chunk in forward order (parallel.pipeline_layers).\n\n";
  md << "| # | layout | devices | pipeline split | peak GiB | margin GiB | step ms | tokens/s | "
        "tok/s/device | MFU % | HFU % | memory parts | time parts "
        "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
}

// The ranked table's rows (numbered within each device count), and the (†)
// note when one of them does not run on this build's trainer.
void plan_md_ranked(std::ostream& md, const PlanSummary& sum) {
  int shown = 0, shown_devices = -1;
  bool dagger = false;
  for (const Candidate* cp : sum.top) {
    const Candidate& c = *cp;
    if (c.devices != shown_devices) shown = 0, shown_devices = c.devices;
    ++shown;
    dagger = dagger || !c.not_runnable.empty();
    md << "| " << shown << " | " << c.name() << (c.not_runnable.empty() ? "" : " (†)") << " | "
       << c.devices << " | " << split_text(c) << " | " << gib(c.mem.peak.total()) << " | "
       << gib(c.margin()) << " | " << ms(c.time.step) << " | " << fx(c.time.tokens_per_s, 1)
       << " | " << fx(c.time.tokens_per_s_device, 1) << " | " << fx(100 * c.time.mfu, 1) << " | "
       << fx(100 * c.time.hfu, 1) << " | " << mem_parts(c.mem) << " | " << time_parts(c.time)
       << " |\n";
  }
  if (dagger)
    md << "\n(†) predicted, but this build's trainer does not run it on the cluster's device "
          "(plan.json: not_runnable).\n";
}

// What does not fit: the notice when nothing does, the nearest layouts over
// the memory limit, and the refusals by reason.
void plan_md_infeasible(std::ostream& md, const Cluster& cl, const PlanSummary& sum) {
  const std::vector<const Candidate*>& nearest = sum.nearest;
  if (sum.feasible == 0)
    md << "\n**No layout is predicted to fit** " << gib(cl.memory_bytes - cl.memory_reserved)
       << " GiB per device (" << gib(cl.memory_bytes) << " less " << gib(cl.memory_reserved)
       << " reserved); scaletrain-plan exits with status 3.\n";
  if (!nearest.empty()) {
    md << "\nNearest over the memory limit:\n\n| layout | peak GiB | over by GiB "
          "| tok/s/device | memory parts |\n|---|---|---|---|---|\n";
    for (const Candidate* c : nearest)
      md << "| " << c->name() << " | " << gib(c->mem.peak.total()) << " | " << gib(-c->margin())
         << " | " << fx(c->time.tokens_per_s_device, 1) << " | " << mem_parts(c->mem) << " |\n";
  }
  if (!sum.why.empty()) {
    md << "\nNot feasible, by reason:\n\n| reason | layouts |\n|---|---|\n";
    for (auto& [k, n] : sum.why) md << "| " << k << " | " << n << " |\n";
  }
}

// plan.csv: every layout, in rank order.
std::string plan_csv(const std::vector<Candidate>& cands) {
  std::ostringstream csv;
  // The columns of a timed layout; an untimed one leaves exactly these empty.
  std::string timed_cols =
      "peak_bytes,weights,grads,optim,activations,buffers,workspace,margin_bytes,step_s,gemm_s,"
      "attention_s,elementwise_s,recompute_s,bubble_s,imbalance_s,";
  for (CommPart p : kAllCommParts) timed_cols += std::string(comm_part_name(p)) + "_exposed_s,";
  timed_cols += "optimizer_s,tokens_per_s,tokens_per_s_device,mfu,hfu";
  const size_t n_timed = size_t(std::count(timed_cols.begin(), timed_cols.end(), ',')) + 1;
  csv << "rank,name,devices,dp,tp,pp,cp,sp,zero_stage,num_model_chunks,dp_bucket_mb,micro_batch,"
         "grad_accum,act_ckpt,pipeline_split,chunk_layers,feasible,reason,"
      << timed_cols << '\n';
  int rank = 0;
  for (const Candidate& c : cands) {
    ++rank;
    const auto& p = c.cfg.parallel;
    std::string reason = c.reason;
    std::replace(reason.begin(), reason.end(), ',', ';');
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    csv << rank << ',' << c.name() << ',' << c.devices << ',' << p.dp << ',' << p.tp << ',' << p.pp
        << ',' << p.cp << ',' << int(p.sp) << ',' << p.zero_stage << ',' << p.num_model_chunks
        << ',' << p.dp_bucket_mb << ',' << c.cfg.train.micro_batch << ',' << c.cfg.train.grad_accum
        << ',' << c.cfg.train.act_ckpt << ',' << c.split << ",\"" << c.chunk_layers() << "\","
        << int(c.feasible) << ",\"" << reason << "\"";
    if (c.timed) {
      const auto& m = c.mem.peak;
      const auto& t = c.time;
      csv << ',' << m.total() << ',' << m.weights << ',' << m.grads << ',' << m.optim << ','
          << m.activations << ',' << m.buffers << ',' << m.workspace << ',' << c.margin() << ','
          << t.step << ',' << t.gemm << ',' << t.attention << ',' << t.elementwise << ','
          << t.recompute << ',' << t.bubble << ',' << t.imbalance << ',';
      for (const CommTime& x : t.comm) csv << x.exposed << ',';
      csv << t.optimizer << ',' << t.tokens_per_s << ',' << t.tokens_per_s_device << ',' << t.mfu
          << ',' << t.hfu;
    } else {
      csv << std::string(n_timed, ',');
    }
    csv << '\n';
  }
  return csv.str();
}

// plan.json: the model, the cluster, the configuration's own layout, the
// command, the counts and every layout in rank order.
json plan_json(const std::vector<Candidate>& cands, const Config& base, const Cluster& cl,
               const ReportOptions& o, const PlanSummary& sum) {
  json j;
  j["model"] = {{"name", base.model.name},
                {"n_layers", base.model.n_layers},
                {"d_model", base.model.d_model},
                {"seq_len", base.model.seq_len}};
  j["cluster"] = {{"path", cl.path},
                  {"name", cl.name},
                  {"device", cl.device},
                  {"peak_flops", cl.peak_flops},
                  {"memory_bytes", cl.memory_bytes},
                  {"memory_reserved_bytes", cl.memory_reserved}};
  // The configuration's own layout (before the knobs vary it): the campaign
  // drivers' guard finds the job's row by it.
  j["base"] = {{"tp", base.parallel.tp},
               {"pp", base.parallel.pp},
               {"cp", base.parallel.cp},
               {"sp", base.parallel.sp},
               {"zero_stage", base.parallel.zero_stage},
               {"num_model_chunks", base.parallel.num_model_chunks},
               {"micro_batch", base.train.micro_batch},
               {"grad_accum", base.train.grad_accum},
               {"act_ckpt", base.train.act_ckpt},
               {"pipeline_layers", base.parallel.pipeline_layers}};
  j["command"] = o.command;
  j["counts"] = {{"layouts", cands.size()},
                 {"feasible", sum.feasible},
                 {"over_memory", sum.over},
                 {"invalid", sum.invalid}};
  j["layouts"] = json::array();
  int rank = 0;
  for (const Candidate& c : cands) j["layouts"].push_back(cand_json(c, ++rank));
  return j;
}

// Campaign: writes campaign.yaml of the top K plus the nearest over the
// limit, runnable ones only; returns plan.md's line about it ("" if none).
std::string write_campaign(const std::vector<Candidate>& cands, const Config& base,
                           const Cluster& cl, const ReportOptions& o, const PlanSummary& sum) {
  const std::vector<const Candidate*>& camp = sum.campaign;
  const std::string cname = o.campaign_name.empty()
                                ? "plan-" + base.model.name + "-" +
                                      std::to_string(cands.empty() ? 0 : cands.front().devices)
                                : o.campaign_name;
  std::string campaign_note;
  if (!camp.empty()) {
    try {
      write_file_atomic((fs::path(o.out_dir) / "campaign.yaml").string(),
                        campaign_yaml(camp, base, cl, cname, o.campaign_steps));
      campaign_note = "campaign.yaml: " + std::to_string(camp.size()) + " layouts (" +
                      "slurm/campaigns/mfu_sweep.sh --campaign " +
                      (fs::path(o.out_dir) / "campaign.yaml").string() + ")";
    } catch (const UsageError& e) {
      campaign_note = std::string("campaign.yaml not written: ") + e.what();
    }
  }
  return campaign_note;
}

}  // namespace

int write_plan(const std::vector<Candidate>& cands, const Config& base, const Cluster& cl,
               const ReportOptions& o, std::ostream& out) {
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw UsageError("--out " + o.out_dir + ": cannot create: " + ec.message());
  const PlanSummary sum = summarize_plan(cands, o.top, o.near);
  std::ostringstream md;
  plan_md_head(md, cands, base, cl, o, sum);
  plan_md_ranked(md, sum);
  plan_md_infeasible(md, cl, sum);
  const std::string campaign_note = write_campaign(cands, base, cl, o, sum);
  if (!campaign_note.empty()) md << "\n" << campaign_note << "\n";
  write_file_atomic((fs::path(o.out_dir) / "plan.md").string(), md.str());
  write_file_atomic((fs::path(o.out_dir) / "plan.csv").string(), plan_csv(cands));
  write_file_atomic((fs::path(o.out_dir) / "plan.json").string(),
                    plan_json(cands, base, cl, o, sum).dump(1) + "\n");
  if (o.plots) plots(cands, cl, o.out_dir, out);
  out << md.str() << "\nwritten: " << o.out_dir << "/plan.md, plan.csv, plan.json"
      << (o.plots ? ", throughput_vs_memory.svg, feasibility_frontier.svg" : "")
      << (sum.campaign.empty() ? "" : ", campaign.yaml") << "\n";
  return sum.feasible;
}

namespace {
// A part of the step in the weak-scaling tables.
struct WeakPart {
  std::string name;
  std::function<double(const StepPrediction&)> get;
};

// The step's parts per scale: compute, the bubble, the first/last-stage
// imbalance, each part's exposed communication, the optimizer (they add up
// to the step).
std::vector<WeakPart> weak_parts() {
  std::vector<WeakPart> parts = {
      {"compute", [](const StepPrediction& t) { return t.compute(); }},
      {"bubble", [](const StepPrediction& t) { return t.bubble; }},
      {"imbalance", [](const StepPrediction& t) { return t.imbalance; }}};
  for (CommPart c : kAllCommParts)
    parts.push_back(
        {comm_part_name(c), [c](const StepPrediction& t) { return t.part(c).exposed; }});
  parts.push_back({"optimizer", [](const StepPrediction& t) { return t.optimizer; }});
  return parts;
}

// weak_scaling.svg (tokens/s per device, efficiency, MFU) and the stacked
// parts, from their data files' text.
void weak_scaling_plots(const ReportOptions& o, const std::string& dat, const std::string& bd,
                        const std::vector<WeakPart>& parts, std::ostream& out) {
  // Devices on a log axis (one node to thousands); every value axis from 0.
  analysis::Plot a{
      "weak_scaling", "Predicted weak scaling: tokens/s per device, efficiency and MFU", dat,
      "set xlabel 'devices'\nset ylabel 'tokens/s per device'\nset y2label 'efficiency, MFU'\n"
      "set logscale x 2\nset yrange [0:*]\nset ytics nomirror\nset y2tics\nset y2range "
      "[0:1.1]\nset key bottom left\n"
      "plot 'weak_scaling.dat' u 1:2 w lp pt 7 t 'tokens/s per device', '' u 1:3 axes x1y2 w lp "
      "pt 5 t 'efficiency', '' u 1:4 axes x1y2 w lp pt 9 t 'MFU'\n"};
  std::string stack = "plot ";
  // Stacked: each curve is the sum of the parts up to it.
  std::string sum;
  for (size_t i = 0; i < parts.size(); ++i) {
    sum += (sum.empty() ? "$" : "+$") + std::to_string(i + 2);
    stack = stack + (i ? ", \\\n  " : "") + "'weak_scaling_parts.dat' u 1:(" + sum + ") w lp t '" +
            (i ? "+ " : "") + parts[i].name + "'";
  }
  analysis::Plot b{"weak_scaling_parts", "Predicted step parts per scale (stacked)", bd,
                   "set xlabel 'devices'\nset ylabel 'ms per step (cumulative)'\n"
                   "set logscale x 2\nset yrange [0:*]\nset key outside right\n" +
                       stack + "\n"};
  const std::string gp = analysis::find_gnuplot();
  for (const auto& pl : {a, b}) {
    const std::string why = analysis::render_plot(o.out_dir, pl, gp);
    if (!why.empty()) out << "plot " << pl.name << ".svg not made: " << why << "\n";
  }
}
}  // namespace

std::vector<WeakPoint> write_weak_scaling(const std::vector<Candidate>& cands,
                                          const std::vector<int>& sizes, const Cluster& cl,
                                          const ReportOptions& o, std::ostream& out) {
  std::vector<WeakPoint> pts = weak_points(cands, sizes);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw UsageError("--out " + o.out_dir + ": cannot create: " + ec.message());
  const std::vector<WeakPart> parts = weak_parts();
  std::ostringstream md, csv, dat, bd;
  md << "# Weak-scaling projection on " << cl.name << "\n\n"
     << "Per size: the fastest predicted-feasible layout at the same per-device batch; "
        "efficiency = tokens/s per device against the smallest feasible size's. Step parts "
        "in ms: compute (GEMM, attention, elementwise, recompute), the pipeline bubble, the "
        "first/last-stage imbalance (embedding, head and loss, an uneven split), the exposed "
        "communication of each group (tp, cp, pp, dp gradients, ZeRO gathers, other: "
        "loss and norm) and the optimizer.\n\n"
     << "| devices | nodes | best layout | pipeline split | global batch | step ms |";
  for (const WeakPart& p : parts) md << " " << p.name << " |";
  md << " tokens/s | tok/s/device | MFU % | peak GiB | efficiency |\n|";
  for (size_t i = 0; i < 11 + parts.size(); ++i) md << "---|";
  md << "\n";
  csv << "devices,nodes,layout,pipeline_split,chunk_layers,dp,tp,pp,cp,sp,zero_stage,"
         "num_model_chunks,micro_batch,grad_accum,global_batch,step_s";
  for (const WeakPart& p : parts) csv << ',' << p.name << "_s";
  csv << ",tokens_per_s,tokens_per_s_device,mfu,peak_bytes,efficiency\n";
  const size_t n_cols = 21 + parts.size();
  dat << "# devices tok_s_device efficiency mfu\n";
  bd << "# devices";
  for (const WeakPart& p : parts) bd << ' ' << p.name << "_ms";
  bd << '\n';
  json j = json::array();
  for (const auto& w : pts) {
    const int nodes = (w.devices + cl.devices_per_node - 1) / cl.devices_per_node;
    if (!w.best) {
      md << "| " << w.devices << " | " << nodes << " | none feasible |";
      for (size_t i = 3; i < 11 + parts.size(); ++i) md << " |";
      md << "\n";
      csv << w.devices << ',' << nodes << std::string(n_cols - 2, ',') << '\n';
      j.push_back({{"devices", w.devices}, {"feasible", false}});
      continue;
    }
    const Candidate& c = *w.best;
    const auto& t = c.time;
    const auto& p = c.cfg.parallel;
    const long global = long(p.dp) * c.cfg.train.micro_batch * c.cfg.train.grad_accum;
    md << "| " << w.devices << " | " << nodes << " | " << c.name() << " | " << split_text(c)
       << " | " << global << " | " << ms(t.step) << " |";
    for (const WeakPart& pt : parts) md << " " << ms(pt.get(t)) << " |";
    md << " " << fx(t.tokens_per_s, 0) << " | " << fx(t.tokens_per_s_device, 1) << " | "
       << fx(100 * t.mfu, 1) << " | " << gib(c.mem.peak.total()) << " | " << fx(w.efficiency, 3)
       << " |\n";
    csv << w.devices << ',' << nodes << ',' << c.name() << ',' << c.split << ",\""
        << c.chunk_layers() << "\"," << p.dp << ',' << p.tp << ',' << p.pp << ',' << p.cp << ','
        << int(p.sp) << ',' << p.zero_stage << ',' << p.num_model_chunks << ','
        << c.cfg.train.micro_batch << ',' << c.cfg.train.grad_accum << ',' << global << ','
        << t.step;
    for (const WeakPart& pt : parts) csv << ',' << pt.get(t);
    csv << ',' << t.tokens_per_s << ',' << t.tokens_per_s_device << ',' << t.mfu << ','
        << c.mem.peak.total() << ',' << w.efficiency << '\n';
    dat << w.devices << ' ' << t.tokens_per_s_device << ' ' << w.efficiency << ' ' << t.mfu << '\n';
    bd << w.devices;
    for (const WeakPart& pt : parts) bd << ' ' << pt.get(t) * 1e3;
    bd << '\n';
    json e = cand_json(c, 0);
    e["efficiency"] = w.efficiency;
    e["global_batch"] = global;
    j.push_back(e);
  }
  write_file_atomic((fs::path(o.out_dir) / "weak_scaling.md").string(), md.str());
  write_file_atomic((fs::path(o.out_dir) / "weak_scaling.csv").string(), csv.str());
  write_file_atomic((fs::path(o.out_dir) / "weak_scaling.json").string(), j.dump(1) + "\n");
  if (o.plots) weak_scaling_plots(o, dat.str(), bd.str(), parts, out);
  out << md.str();
  return pts;
}

}  // namespace st::plan
