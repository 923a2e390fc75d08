// Report writers (see report.hpp).
#include "analyze/report.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analyze/ckpt_study.hpp"
#include "analyze/plots.hpp"
#include "analyze/prediction.hpp"
#include "analyze/stats.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "telemetry/schema.hpp"

namespace st::analysis {
namespace {

std::string f(double v, int prec = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

// 989.0 TFLOP/s for GPUs, 48.2 GFLOP/s for a CPU rank.
std::string flops_text(double v) {
  if (v >= 1e12) return f(v / 1e12, 1) + " TFLOP/s";
  return f(v / 1e9, 1) + " GFLOP/s";
}

// 6.738B, 19.67M, 106.8K.
std::string params_text(double n) {
  if (n >= 1e9) return f(n / 1e9, 3) + "B";
  if (n >= 1e6) return f(n / 1e6, 2) + "M";
  return f(n / 1e3, 1) + "K";
}
std::string pct(double frac, int prec = 2) { return f(100 * frac, prec) + "%"; }

void make_dir(const std::string& d) {
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) throw UsageError("--out: cannot create '" + d + "': " + ec.message());
}

void emit(const std::string& dir, const std::string& name, const std::string& text, Written& w) {
  std::ofstream o(dir + "/" + name);
  if (!o) throw Error("cannot write '" + dir + "/" + name + "'");
  o << text;
  w.files.push_back(name);
}

void plots_into(const std::string& dir, const std::vector<Plot>& ps, Written& w) {
  const std::string gp = find_gnuplot();
  for (auto& p : ps) {
    std::string why = render_plot(dir, p, gp);
    if (why.empty())
      w.files.push_back(p.name + ".svg");
    else
      w.skipped_plots.push_back(p.name + ".svg: " + why);
  }
}

const char* kCsvHeader =
    "run,model,seq_len,gpus,device,mfu,hfu,model_tflop,micro_batch,grad_accum,global_batch,"
    "throughput_seq_s,throughput_tok_s,throughput_tok_s_gpu,global_batch_tokens,precision,"
    "sharding,act_ckpt,num_params,series,scaling,efficiency,window,step_p50_s,peak_flops,"
    "flops_formula,point,repeats,cpu_s_step\n";

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

// The step's parts by name (core/step_parts.hpp): summary.json's
// shares.parts.
nlohmann::json step_parts_json(const StepParts& part) {
  nlohmann::json j = nlohmann::json::object();
  for (StepPart p : kAllStepParts) j[step_part_name(p)] = part[ix(p)];
  return j;
}
// Exposed communication by part (core/step_parts.hpp) and what
// no wait explains: summary.json's and campaign.json's comm_exposed_parts.
nlohmann::json parts_json(const std::array<double, kCommParts>& part, double unattributed) {
  nlohmann::json j = nlohmann::json::object();
  for (CommPart p : kAllCommParts) j[comm_part_name(p)] = part[ix(p)];
  j["unattributed"] = unattributed;
  return j;
}
// The checkpoint folder's probed speed (run.json `storage`) beside the
// node's write bandwidth per commit ("x% of the disk"), and Young/Daly's
// interval from the measured cost C for an MTBF of one day.
std::string storage_markdown(const RunSummary& s) {
  std::ostringstream o;
  const auto& st = s.storage;
  auto num = [&st](const char* k) { return st.is_object() ? st.value(k, 0.0) : 0.0; };
  if (num("write_all_Bps") > 0) {
    o << "\nStorage probe (run.json `storage`, " << st.value("dir", std::string()) << "): write "
      << "(fdatasync) " << human_bytes(num("write_one_Bps")) << "/s by 1 writer, "
      << human_bytes(num("write_all_Bps")) << "/s by " << st.value("writers", 1) << "; cold read ("
      << st.value("read_method", std::string()) << ") " << human_bytes(num("read_one_Bps"))
      << "/s by 1, " << human_bytes(num("read_all_Bps")) << "/s by " << st.value("writers", 1)
      << ".\n";
    if (s.ckpt_node_Bps > 0)
      o << "Checkpoint write, node (median of the commits): " << human_bytes(s.ckpt_node_Bps)
        << "/s = " << pct(s.ckpt_of_disk, 0) << " of the disk.\n";
  }
  const SteadyCkpt sc = steady_checkpoints(s.ckpt_cost);
  if (!sc.cost_s.empty() && s.step_p50 > 0) {
    const double c = median(sc.cost_s), mtbf = 86400;
    const double y = young_interval(c, mtbf), d = daly_interval(c, mtbf);
    o << "Young/Daly with the measured C = " << f(c, 4) << " s (steady checkpoints' median) and "
      << "an MTBF of 1 day: every " << f(y, 0) << " s / " << f(d, 0) << " s, "
      << f(y / s.step_p50, 0) << " / " << f(d / s.step_p50, 0) << " steps of " << f(s.step_p50, 3)
      << " s.\n";
  }
  return o.str();
}
}  // namespace

namespace {
nlohmann::json checkpoint_json(const RunSummary& s) {
  nlohmann::json cost = nlohmann::json::array();
  for (const auto& c : s.ckpt_cost)
    cost.push_back({{"step", c.step},
                    {"stall_s", c.stall_s},
                    {"wait_prev_s", c.wait_prev_s},
                    {"interference_s", c.interference_s},
                    {"steps_during", c.steps_during},
                    {"persist_s", c.persist_s}});
  return {{"steps", s.ckpt_steps},
          {"total_step_s", s.total_step_s},
          {"instrumented",
           {{"stall_s", s.ckpt_stall_sum},
            {"overhead", s.ckpt_overhead_instr},
            {"source", s.ckpt_instr_source}}},
          {"step_time_excess",
           {{"stall_s", s.ckpt_excess_sum},
            {"overhead", s.ckpt_overhead_excess},
            {"per_checkpoint_s", s.ckpt_excess}}},
          {"cost",
           {{"stall_share", s.ckpt_stall_share},
            {"interference_s", s.ckpt_interference_s},
            {"interference_share", s.ckpt_interference_share},
            {"persist_s", s.ckpt_persist_s},
            {"per_checkpoint", cost}}},
          {"restore_load_s", s.ckpt_load_s},
          {"aggregate_bytes", s.ckpt_agg_bytes},
          {"aggregate_write_Bps", s.ckpt_agg_bw},
          {"write_s_mean", s.ckpt_write_s_mean},
          {"bytes_mean", s.ckpt_bytes_mean},
          {"bandwidth_Bps_mean", s.ckpt_bw_mean},
          {"node_write_Bps", s.ckpt_node_Bps},
          {"of_disk", s.ckpt_of_disk},
          {"storage", s.storage}};
}

nlohmann::json stragglers_json(const RunSummary& s) {
  nlohmann::json st;
  st["rank_step_skew"] = s.rank_step_skew;
  st["rank_busy_skew"] = s.rank_busy_skew;
  st["host_busy_skew"] = s.host_busy_skew;
  st["slowest_ranks"] = nlohmann::json::array();
  for (int r : s.slowest_ranks) {
    for (auto& rs : s.ranks)
      if (rs.rank == r)
        st["slowest_ranks"].push_back({{"rank", r},
                                       {"host", rs.host},
                                       {"busy_s", rs.busy_med},
                                       {"dist_from_median", rs.dist}});
  }
  st["slowest_hosts"] = nlohmann::json::array();
  for (int h : s.slowest_hosts)
    st["slowest_hosts"].push_back({{"host", s.hosts[h].host},
                                   {"busy_s", s.hosts[h].busy},
                                   {"dist_from_median", s.hosts[h].dist}});
  st["hosts"] = nlohmann::json::array();  // every host, in name order
  for (const auto& h : s.hosts)
    st["hosts"].push_back(
        {{"host", h.host}, {"ranks", h.ranks}, {"busy_s", h.busy}, {"dist_from_median", h.dist}});
  st["out_of_line"] = nlohmann::json::array();
  for (auto& o : s.out_of_line)
    st["out_of_line"].push_back(
        {{"rank", o.rank}, {"share", o.what}, {"value", o.share}, {"median", o.median_share}});
  st["waited_for_ranks"] = nlohmann::json::array();
  for (const auto& [r, w] : s.waited_for_rank)
    st["waited_for_ranks"].push_back({{"rank", r}, {"waited_s", w}});
  st["waited_for_hosts"] = nlohmann::json::array();
  for (const auto& [h, w] : s.waited_for_host)
    st["waited_for_hosts"].push_back({{"host", h}, {"waited_s", w}});
  return st;
}
}  // namespace

nlohmann::json run_to_json(const RunSummary& s) {
  nlohmann::json j;
  j["dir"] = s.dir;
  j["name"] = s.name;
  j["model"] = s.model;
  j["device"] = s.device;
  j["gpus"] = s.gpus;
  j["seq_len"] = s.seq_len;
  j["n_params"] = s.n_params;
  j["micro_batch"] = s.micro_batch;
  j["grad_accum"] = s.grad_accum;
  j["global_batch"] = s.global_batch;
  j["global_batch_tokens"] = s.global_batch_tokens;
  j["precision"] = s.precision;
  j["act_ckpt"] = s.act_ckpt;
  j["sharding"] = s.sharding;
  j["window"] = {{"text", s.window_text},
                 {"first_step", s.win_first},
                 {"last_step", s.win_last},
                 {"n_steps", s.win_n},
                 {"steps_recorded", s.steps_total}};
  j["step_time_s"] = {{"p50", s.step_p50}, {"p90", s.step_p90}, {"max", s.step_max}};
  j["cpu_s_step"] = s.cpu_s_step;
  j["tokens_per_step"] = s.tokens_per_step;
  j["tok_s"] = s.tok_s;
  j["tok_s_gpu"] = s.tok_s_gpu;
  j["seq_s"] = s.seq_s;
  j["flops_formula"] = s.formula;
  j["peak_flops"] = s.peak;
  j["peak_source"] = s.peak_source;
  j["model_flops_per_seq"] = s.model_flops_per_seq;
  j["hw_flops_per_seq"] = s.hw_flops_per_seq;
  j["mfu_pct"] = s.mfu;
  j["hfu_pct"] = s.hfu;
  j["model_tflops_per_gpu"] = s.model_tflops_gpu;
  j["mem_peak_bytes"] = s.mem_peak_bytes;
  j["mem_capacity_bytes"] = s.mem_capacity_bytes;
  j["mem_capacity_source"] = s.mem_capacity_source;
  j["shares"] = {{"comm", s.comm_share}, {"parts", step_parts_json(s.part_share)}};
  j["shares"]["comm_exposed_parts"] = parts_json(s.comm_part_share, s.comm_unattributed_share);
  j["checkpoint"] = checkpoint_json(s);
  j["stragglers"] = stragglers_json(s);
  j["flagged_ranks"] = s.flagged_ranks;
  j["errors"] = s.errors;
  j["warnings"] = s.warnings;
  return j;
}

// The closing "Files" list of a report: what was written, and skipped plots.
static void files_section(std::ostringstream& o, const Written& w) {
  o << "\n## Files\n\n";
  for (auto& x : w.files) o << "- " << x << "\n";
  for (auto& x : w.skipped_plots) o << "- skipped " << x << "\n";
}

namespace {
void checkpoint_markdown(std::ostringstream& o, const RunSummary& s) {
  o << "\n## Checkpoint overhead\n\n"
    << s.ckpt_steps.size() << " checkpoint(s); total step time " << f(s.total_step_s, 2)
    << " s.\n\n";
  o << "| method | stall (s) | overhead |\n|---|---|---|\n";
  o << "| instrumented (" << s.ckpt_instr_source << ") | " << f(s.ckpt_stall_sum, 3) << " | "
    << pct(s.ckpt_overhead_instr, 3) << " |\n";
  o << "| step-time excess (slowest of the checkpoint step and the 12 after it, minus the "
       "window median) | "
    << f(s.ckpt_excess_sum, 3) << " | " << pct(s.ckpt_overhead_excess, 3) << " |\n";
  if (!s.ckpt_cost.empty()) {
    o << "\nIn three parts (each committed checkpoint): the blocking **stall** (the step's "
         "wait for this save's snapshot; the wait for the previous save to finish, when it "
         "outlasted the interval, is that save's and is shown apart), the background "
         "**interference** (the steps that started before the commit, "
         "after the save's step: their time minus the window median, summed; noise makes it "
         "negative when there is none), and the **persistence** time (first snapshot to last "
         "commit, which overlaps training).\n\n"
      << "| step | stall (s) | waited for the previous save (s) | interference (s) | steps "
         "during write | persistence (s) |\n"
         "|---|---|---|---|---|---|\n";
    for (const auto& c : s.ckpt_cost)
      o << "| " << c.step << " | " << f(c.stall_s, 3) << " | " << f(c.wait_prev_s, 3) << " | "
        << f(c.interference_s, 3) << " | " << c.steps_during << " | " << f(c.persist_s, 3)
        << " |\n";
    o << "| **run** | " << pct(s.ckpt_stall_share, 3) << " of step time | | "
      << pct(s.ckpt_interference_share, 3) << " of step time | | " << f(s.ckpt_persist_s, 3)
      << " s in all |\n";
    const SteadyCkpt sc = steady_checkpoints(s.ckpt_cost);
    o << "\nFirst checkpoint (step " << s.ckpt_cost.front().step << "): stall + interference "
      << f(sc.first_cost_s, 4) << " s. Steady state (the " << sc.cost_s.size() << " after it): "
      << (sc.cost_s.empty() ? std::string("none")
                            : "median " + f(median(sc.cost_s), 4) + " s per checkpoint")
      << " (the cost C of the checkpoint study).\n";
  }
  if (s.ckpt_load_s > 0)
    o << "\nRestore at start (ckpt_resume, slowest rank): " << f(s.ckpt_load_s, 3) << " s.\n";
  if (s.ckpt_write_s_mean > 0)
    o << "\nBackground write: " << f(s.ckpt_write_s_mean, 3) << " s, "
      << human_bytes(s.ckpt_bytes_mean) << ", " << human_bytes(s.ckpt_bw_mean)
      << "/s per checkpoint (rank 0 mean).\n";
  o << storage_markdown(s);
}

void stragglers_markdown(std::ostringstream& o, const RunSummary& s) {
  o << "\n## Stragglers\n\nBusy time = step time - exposed communication (the slow rank computes, "
       "the others wait).\n\n";
  o << "Skew (max-min)/median: rank step time " << pct(s.rank_step_skew) << ", rank busy time "
    << pct(s.rank_busy_skew) << ", host busy time " << pct(s.host_busy_skew) << ".\n\n";
  o << "| slowest ranks | host | busy (s) | vs median |\n|---|---|---|---|\n";
  for (int r : s.slowest_ranks)
    for (auto& rs : s.ranks)
      if (rs.rank == r)
        o << "| " << r << " | " << rs.host << " | " << f(rs.busy_med, 4) << " | "
          << (rs.dist >= 0 ? "+" : "") << pct(rs.dist) << " |\n";
  o << "\n| slowest hosts | busy (s) | vs median |\n|---|---|---|\n";
  for (int h : s.slowest_hosts)
    o << "| " << s.hosts[h].host << " | " << f(s.hosts[h].busy, 4) << " | "
      << (s.hosts[h].dist >= 0 ? "+" : "") << pct(s.hosts[h].dist) << " |\n";
  if (!s.waited_for_rank.empty()) {
    o << "\nTime others waited for this rank (summed over the collectives it arrived last at, "
         "from the trace records):\n\n| rank | others waited (s) |\n|---|---|\n";
    for (const auto& [r, w] : s.waited_for_rank) o << "| " << r << " | " << f(w, 4) << " |\n";
    o << "\n| host | others waited (s) |\n|---|---|\n";
    for (const auto& [h, w] : s.waited_for_host) o << "| " << h << " | " << f(w, 4) << " |\n";
  }
  o << "\nRanks with a share out of line: ";
  if (s.out_of_line.empty()) o << "none.\n";
  for (auto& x : s.out_of_line)
    o << "\n- rank " << x.rank << ": " << x.what << " share " << pct(x.share) << " (median "
      << pct(x.median_share) << ")";
  o << "\n";
}
}  // namespace

std::string run_markdown(const RunSummary& s, const Written& w) {
  std::ostringstream o;
  o << "# scaletrain run report: " << (s.name.empty() ? s.dir : s.name) << "\n\n";
  o << "**Window:** " << s.window_text << "  \n";
  o << "**FLOP formula:** " << s.formula << "  \n";
  o << "**Peak:** " << (s.peak > 0 ? flops_text(s.peak) + " per device, " : "") << s.peak_source
    << "\n\n";
  o << "| quantity | value |\n|---|---|\n";
  o << "| model | " << s.model << " (" << params_text(s.n_params) << " params, seq " << s.seq_len
    << ") |\n";
  o << "| GPUs / device | " << s.gpus << " x " << s.device << " |\n";
  o << "| precision / act ckpt / sharding | " << s.precision
    << (s.precision_choice.empty() ? "" : " (" + s.precision_choice + ")") << " / " << s.act_ckpt
    << " / " << s.sharding << " |\n";
  o << "| step time p50 / p90 / max | " << f(s.step_p50, 4) << " / " << f(s.step_p90, 4) << " / "
    << f(s.step_max, 4) << " s |\n";
  o << "| tokens/s | " << f(s.tok_s, 1) << " |\n| tokens/s per GPU | " << f(s.tok_s_gpu, 1)
    << " |\n| sequences/s | " << f(s.seq_s, 3) << " |\n";
  o << "| MFU / HFU | " << f(s.mfu) << "% / " << f(s.hfu) << "% |\n";
  o << "| model FLOP/s per GPU | " << flops_text(s.model_tflops_gpu * 1e12) << " |\n";
  o << "| peak memory (max over ranks) | " << human_bytes(double(s.mem_peak_bytes));
  if (s.mem_capacity_bytes > 0)
    o << " of " << human_bytes(double(s.mem_capacity_bytes)) << " (headroom "
      << human_bytes(double(s.mem_capacity_bytes - s.mem_peak_bytes))
      << "; capacity: " << s.mem_capacity_source << ")";
  o << " |\n";
  o << "| step by part |";
  for (StepPart p : kAllStepParts) o << " " << step_part_name(p) << " " << pct(s.part_share[ix(p)]);
  o << " |\n";
  o << "| exposed comm by part |";
  for (CommPart p : kAllCommParts)
    o << " " << comm_part_name(p) << " " << pct(s.comm_part_share[ix(p)]);
  o << " unattributed " << pct(s.comm_unattributed_share) << " |\n";
  o << "| time inside collectives (hidden or not) | " << pct(s.comm_share) << " |\n";
  if (!s.loss.empty())
    o << "| training loss first / last | " << f(s.loss.front().second, 4) << " (step "
      << s.loss.front().first << ") / " << f(s.loss.back().second, 4) << " (step "
      << s.loss.back().first << ") |\n";
  if (!s.val_loss.empty())
    o << "| validation loss first / last | " << f(s.val_loss.front().second, 4) << " (step "
      << s.val_loss.front().first << ") / " << f(s.val_loss.back().second, 4) << " (step "
      << s.val_loss.back().first << ") |\n";
  o << prediction_markdown(check_prediction(s));
  checkpoint_markdown(o, s);
  stragglers_markdown(o, s);
  if (!s.flagged_ranks.empty() || !s.warnings.empty()) o << "\n## Problems\n\n";
  for (auto& e : s.errors) o << "- error (rank excluded): " << e << "\n";
  for (auto& e : s.warnings) o << "- " << e << "\n";
  files_section(o, w);
  return o.str();
}

Written write_run_outputs(const RunSummary& s, const std::string& out_dir, bool plots) {
  make_dir(out_dir);
  Written w;
  std::ostringstream steps;
  steps << "step,step_max_s,step_median_s,ckpt_stall_max_s,global_tokens,in_window,ckpt\n";
  for (auto& r : s.steps)
    steps << r.step << ',' << r.step_max << ',' << r.step_med << ',' << r.stall_max << ','
          << r.global_tokens << ',' << int(r.in_window) << ',' << int(r.ckpt) << '\n';
  emit(out_dir, "steps.csv", steps.str(), w);
  std::ostringstream ranks;
  ranks << "rank,host,step_median_s,busy_median_s,busy_dist_from_median";
  for (StepPart p : kAllStepParts) ranks << ',' << step_part_name(p) << "_share";
  ranks << '\n';
  for (auto& r : s.ranks) {
    ranks << r.rank << ',' << csv_quote(r.host) << ',' << r.step_med << ',' << r.busy_med << ','
          << r.dist;
    for (double v : r.part_share) ranks << ',' << v;
    ranks << '\n';
  }
  emit(out_dir, "ranks.csv", ranks.str(), w);
  if (plots) plots_into(out_dir, run_plots(s), w);
  // Folder names come from the command line and need not be UTF-8.
  const auto lossy = nlohmann::json::error_handler_t::replace;
  emit(out_dir, "summary.json", run_to_json(s).dump(2, ' ', false, lossy) + "\n", w);
  emit(out_dir, "report.md", run_markdown(s, w), w);
  return w;
}

std::string campaign_csv(const Campaign& c) {
  std::ostringstream o;
  o << kCsvHeader;
  for (size_t si = 0; si < c.series.size(); ++si)
    for (size_t k = 0; k < c.series[si].points.size(); ++k) {
      const Point& p = c.points[c.series[si].points[k]];
      for (size_t i : p.runs) {
        const RunSummary& r = c.runs[i];
        // The run's own efficiency against the base point's median.
        const Point& b = c.points[c.series[si].points.front()];
        const double ideal = b.tok_s.med * double(r.gpus) / double(std::max(1, b.gpus));
        o << csv_quote(r.dir) << ',' << csv_quote(r.model) << ',' << r.seq_len << ',' << r.gpus
          << ',' << csv_quote(r.device) << ',' << f(r.mfu) << ',' << f(r.hfu) << ','
          << f(r.model_tflops_gpu, 1) << ',' << r.micro_batch << ',' << r.grad_accum << ','
          << r.global_batch << ',' << f(r.seq_s, 3) << ',' << f(r.tok_s, 1) << ','
          << f(r.tok_s_gpu, 1) << ',' << r.global_batch_tokens << ',' << r.precision << ','
          << r.sharding << ',' << r.act_ckpt << ',' << r.n_params << ',' << si << ','
          << c.series[si].kind << ',' << f(ideal > 0 ? r.tok_s / ideal : 0, 4) << ','
          << csv_quote(r.window_text) << ',' << r.step_p50 << ',' << r.peak << ','
          << csv_quote(r.formula) << ',' << c.series[si].points[k] << ',' << p.runs.size() << ','
          << r.cpu_s_step << '\n';
      }
    }
  return o.str();
}

namespace {
std::string spread_text(const Spread& s, int prec, double scale = 1) {
  return f(s.med * scale, prec) + " [" + f(s.lo * scale, prec) + ", " + f(s.hi * scale, prec) + "]";
}

std::string seconds_text(double s) {
  if (s >= 86400) return f(s / 86400, 2) + " d";
  if (s >= 3600) return f(s / 3600, 2) + " h";
  if (s >= 60) return f(s / 60, 1) + " min";
  return f(s, 1) + " s";
}

std::string ckpt_markdown(const CkptStudy& st) {
  if (st.empty()) return "";
  std::ostringstream o;
  o << "## Checkpoint study\n\nOverhead = (stall + background interference) / step time of "
       "the run, median [min, max] over repeats (every checkpoint of the run, the first "
       "included). Cost of a checkpoint = its stall plus its interference; persistence = first "
       "snapshot to last commit. C and P are the steady state's: the medians over every "
       "checkpoint after a run's first, pooled over the repeats (steady checkpoints: how many, "
       "and the fewest in one run). The first checkpoint of a run is reported apart (first "
       "checkpoint stall: its cost, median over repeats); it is not part of C. Aggregate "
       "bandwidth = every rank's bytes of a checkpoint / the slowest rank's write time, mean "
       "over the run's checkpoints.\n\n"
    << "| ranks | mode | interval (steps) | overhead | stall | interference | C (s) | P (s) | "
       "first checkpoint stall (s) | steady checkpoints (fewest per run) | aggregate write | "
       "node write MiB/s | probed write MiB/s (run.json `storage`) | node write / probed | "
       "bytes per checkpoint |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto mibs = [](double Bps) { return Bps > 0 ? f(Bps / 1048576, 0) : std::string("not probed"); };
  for (const auto& k : st.points)
    o << "| " << k.gpus << " | " << k.mode << " | " << k.interval << " | "
      << spread_text(k.overhead, 3, 100) << "% | " << pct(k.stall_share.med, 3) << " | "
      << pct(k.interference_share.med, 3) << " | " << f(k.cost_s, 4) << " | " << f(k.persist_s, 4)
      << " | " << f(k.first_cost_s, 4) << " | " << k.steady_n << " (" << k.steady_min_run << ") | "
      << human_bytes(k.agg_bw) << "/s | " << mibs(k.node_Bps) << " | " << mibs(k.probed_write_Bps)
      << " | " << (k.of_disk > 0 ? pct(k.of_disk, 0) : "not probed") << " | "
      << human_bytes(k.bytes) << " |\n";
  for (const auto& n : st.notes) o << "\nNote: " << n << ".\n";
  o << "\n**Storage limit:** ";
  if (st.storage.measured)
    o << human_bytes(st.storage.bandwidth) << "/s, a sequential write of "
      << human_bytes(st.storage.bytes) << " in " << f(st.storage.seconds, 3) << " s ("
      << st.storage.method << ", " << st.storage.path << ").\n\n";
  else
    o << "not measured (no storage.json in the campaign folder; slurm/campaigns/finish.sbatch "
         "writes one for checkpoint campaigns).\n\n";
  o << "**Restore time** (the slowest rank's load at resume): ";
  if (st.restore_s.empty())
    o << "no run of the campaign resumed.\n\n";
  else {
    o << "\n\n| ranks | restore (s), median [min, max] |\n|---|---|\n";
    for (const auto& [g, sp] : st.restore_s)
      o << "| " << g << " | " << spread_text(sp, 3) << " |\n";
    o << "\n";
  }
  if (!st.restore_rate.empty()) {
    o << "**Restore bandwidth** (the checkpoint's bytes over the whole restore: the step's "
         "choice, its metadata check and the load, slowest rank, median over resumed runs; per "
         "node) beside the storage probe's cold read of that size's node (run.json "
         "`storage.read_all_Bps`, median over the size's runs):\n\n"
         "| ranks | bytes | restore (s) | restore MiB/s per node | probed cold read MiB/s | "
         "restore / probed |\n|---|---|---|---|---|---|\n";
    for (const auto& r : st.restore_rate)
      o << "| " << r.gpus << " | " << human_bytes(r.bytes) << " | " << f(r.restore_s, 3) << " | "
        << mibs(r.node_Bps) << " | " << mibs(r.probed_read_Bps) << " | "
        << (r.probed_read_Bps > 0 ? f(r.node_Bps / r.probed_read_Bps, 2) : "not probed") << " |\n";
    o << "\n";
  }
  o << "### Optimal interval for a failure rate\n\nThe interval T that minimises the "
       "expected lost time C/T + (T/2 + P + R)/M for a mean time between failures M "
       "(Young: T = sqrt(2CM); Daly: T = sqrt(2CM)(1 + sqrt(C/2M)/3 + C/18M) - C; an async "
       "save cannot come more often than its persistence P). See docs/analysis.md for the "
       "assumptions.\n\n"
    << "C and P: medians over the steady-state checkpoints of every interval and repeat of "
       "the size and mode; the first checkpoint stall (median over runs) is one-time and "
       "left out of C.\n\n"
    << "| ranks | mode | MTBF | C (s) | steady checkpoints | first checkpoint stall (s) | P (s) "
       "| R (s) | Young | Daly | interval | steps | expected loss |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : st.optimal)
    o << "| " << x.gpus << " | " << x.mode << " | " << seconds_text(x.mtbf_s) << " | "
      << f(x.cost_s, 4) << " | " << x.steady_n << " | " << f(x.first_cost_s, 4) << " | "
      << f(x.persist_s, 4) << " | " << f(x.restore_s, 3) << " | " << seconds_text(x.young_s)
      << " | " << seconds_text(x.daly_s) << " | " << seconds_text(x.interval_s) << " | "
      << f(x.steps, 0) << " | " << pct(x.waste, 3) << " |\n";
  o << "\n";
  return o.str();
}
}  // namespace

namespace {
// Repeats of each point against each other (campaign.hpp, RepeatCheck).
std::string repeats_markdown(const Campaign& c) {
  bool any = false;
  for (const auto& p : c.points) any |= p.runs.size() > 1;
  if (!any) return "";
  std::ostringstream o;
  o << "## Repeats\n\nEach point's repeats against each other: their median steps, how far the "
       "slowest is from the fastest, and what the same work cost the ranks in CPU time a step "
       "(telemetry `cpu_s`, the median over ranks and window steps). When the slower repeat's "
       "work also cost more CPU time (by at least half the steps' spread), the host's speed "
       "moved between them (its clock, steal time a guest cannot see, other tenants), not the "
       "layout's timing. Repeats agree within "
    << pct(kRepeatTolerance, 0) << ".\n\n"
    << "| layout | ranks | nodes | step (s) per repeat | spread | CPU-s / step per repeat | "
       "slowest against fastest, CPU-s / step | verdict |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& p : c.points) {
    if (p.runs.size() < 2) continue;
    std::string steps, cpus;
    for (size_t i : p.runs) {
      steps += (steps.empty() ? "" : ", ") + f(c.runs[i].step_p50, 3);
      cpus += (cpus.empty() ? "" : ", ") +
              (c.runs[i].cpu_s_step > 0 ? f(c.runs[i].cpu_s_step, 3) : std::string("-"));
    }
    const RepeatCheck& q = p.repeats;
    o << "| " << p.layout << " | " << p.gpus << " | " << p.nodes << " | " << steps << " | "
      << percent_text(q.step_spread) << " | " << cpus << " | "
      << (q.cpu_recorded ? percent_text(q.cpu_change, true) : std::string("-")) << " | "
      << q.verdict << " |\n";
  }
  o << "\n";
  return o.str();
}
}  // namespace

std::string campaign_markdown(const Campaign& c, const Written& w) {
  std::ostringstream o;
  o << "# scaletrain campaign report\n\n";
  if (!c.campaign_peak_source.empty()) o << "**Peak:** " << c.campaign_peak_source << ".\n\n";
  o << "Runs with the same model, layout and size are repeats of one point: each cell is the "
       "median over the repeats with [min, max]; tok/s per device also gives p10-p90 over the "
       "steady-state steps of all repeats. Efficiency = tok/s at N / (tok/s at base x N/base), "
       "medians.\n\n";
  size_t variants = 0;
  for (const auto& s : c.series) variants += s.ckpt_variant ? 1 : 0;
  if (variants > 0)
    o << variants << " checkpointed layout(s) of the same model and layout are the checkpoint "
      << "study's points (below), not scaling series of their own.\n\n";
  for (const Series* sp : scaling_series(c)) {
    const Series& s = *sp;
    o << "## " << s.model << ", " << s.layout << ": " << s.kind
      << (s.kind == "single" ? " point"
                             : " scaling, base " + std::to_string(s.base_gpus) + " ranks")
      << "\n\n";
    o << "| ranks | nodes | repeats | T/s/device [min, max] | T/s/device p10-p90 (steps) | "
         "T/s [min, max] | MFU % [min, max] | HFU % | step (s) | Efficiency | Predicted T/s/device "
         "| Predicted MFU % | Memory peak / capacity (headroom) |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (size_t k = 0; k < s.points.size(); ++k) {
      const Point& p = c.points[s.points[k]];
      o << "| " << p.gpus << " | " << p.nodes << " | " << p.runs.size() << " | "
        << spread_text(p.tok_s_gpu, 1) << " | " << f(p.tok_s_gpu_p10, 1) << "-"
        << f(p.tok_s_gpu_p90, 1) << " | " << spread_text(p.tok_s, 1) << " | "
        << spread_text(p.mfu, 2) << " | " << f(p.hfu.med) << " | " << f(p.step_s.med, 4) << " | "
        << (s.kind == "single" ? std::string("-") : spread_text(s.efficiency[k], 1, 100) + "%")
        << " | " << (p.pred_tok_s_gpu > 0 ? f(p.pred_tok_s_gpu, 1) : "-") << " | "
        << (p.pred_mfu > 0 ? f(p.pred_mfu) : "-") << " | " << human_bytes(double(p.mem_peak_bytes))
        << (p.mem_capacity_bytes > 0
                ? " / " + human_bytes(double(p.mem_capacity_bytes)) + " (" +
                      human_bytes(double(p.mem_capacity_bytes - p.mem_peak_bytes)) + ")"
                : std::string(" / -"))
        << " |\n";
    }
    o << "\n";
  }
  o << repeats_markdown(c);
  o << "### Runs\n\n";
  o << "| Run | Model | SeqLen | GPUs | Device | MFU | HFU | Model TFLOP | MicroBatch | GradAccum "
       "| "
       "GlobalBatch | Throughput (S/s) | Throughput (T/s) | T/s/GPU | GlobalBatchTokens | "
       "Precision | Sharding | ActCkpt | NumParams | Window | Peak |\n";
  o << "|";
  for (int i = 0; i < 21; ++i) o << "---|";
  o << "\n";
  for (const auto& r : c.runs)
    o << "| " << r.dir << " | " << r.model << " | " << r.seq_len << " | " << r.gpus << " | "
      << r.device << " | " << f(r.mfu) << " | " << f(r.hfu) << " | " << f(r.model_tflops_gpu, 1)
      << " | " << r.micro_batch << " | " << r.grad_accum << " | " << r.global_batch << " | "
      << f(r.seq_s, 2) << " | " << f(r.tok_s, 1) << " | " << f(r.tok_s_gpu, 1) << " | "
      << r.global_batch_tokens << " | " << r.precision << " | " << r.sharding << " | " << r.act_ckpt
      << " | " << r.n_params << " | " << r.window_text << " | " << r.peak_source << " |\n";
  o << "\n";
  if (!c.runs.empty()) o << "FLOP formula: " << c.runs.front().formula << "\n\n";
  o << campaign_prediction_markdown(c.runs);
  o << ckpt_markdown(checkpoint_study(c, c.mtbf_s, c.storage_json));
  // Checkpoint cost in three parts, per run (each run's report.md has them
  // per checkpoint): shares of the run's total step time, persistence in s.
  bool any_ckpt = false;
  for (const auto& r : c.runs) any_ckpt |= !r.ckpt_cost.empty();
  if (any_ckpt) {
    o << "## Checkpoint cost per run\n\nStall and background interference as shares of each "
         "run's step time; persistence (first snapshot to last commit, overlapping training) in "
         "seconds, summed over its checkpoints.\n\n"
      << "| run | checkpoints | stall | interference | persistence (s) |\n|---|---|---|---|---|\n";
    for (const auto& r : c.runs)
      o << "| " << r.dir << " | " << r.ckpt_cost.size() << " | " << pct(r.ckpt_stall_share, 3)
        << " | " << pct(r.ckpt_interference_share, 3) << " | " << f(r.ckpt_persist_s, 3) << " |\n";
    o << "\n";
  }
  if (!c.warnings.empty()) o << "## Warnings\n\n";
  for (auto& x : c.warnings) o << "- " << x << "\n";
  for (auto& r : c.runs)
    for (auto& x : r.warnings) o << "- " << r.dir << ": " << x << "\n";
  files_section(o, w);
  return o.str();
}

namespace {
nlohmann::json spread_json(const Spread& s) {
  return nlohmann::json{{"median", s.med}, {"min", s.lo}, {"max", s.hi}};
}

nlohmann::json points_json(const Campaign& c) {
  const auto sp = spread_json;
  nlohmann::json out;
  out = nlohmann::json::array();
  for (const auto& p : c.points) {
    nlohmann::json jp = {
        {"key", p.key},
        {"layout", p.layout},
        {"gpus", p.gpus},
        {"nodes", p.nodes},
        {"tok_s", sp(p.tok_s)},
        {"tok_s_gpu", sp(p.tok_s_gpu)},
        {"tok_s_gpu_steps_p10", p.tok_s_gpu_p10},
        {"tok_s_gpu_steps_p90", p.tok_s_gpu_p90},
        {"mfu_pct", sp(p.mfu)},
        {"hfu_pct", sp(p.hfu)},
        {"step_s", sp(p.step_s)},
        {"cpu_s_step", sp(p.cpu_s_step)},
        {"repeats_check",
         {{"step_spread", p.repeats.step_spread},
          {"cpu_change",
           p.repeats.cpu_recorded ? nlohmann::json(p.repeats.cpu_change) : nlohmann::json(nullptr)},
          {"verdict", p.repeats.verdict}}},
        {"predicted_tok_s_gpu", p.pred_tok_s_gpu},
        {"predicted_mfu_pct", p.pred_mfu},
        {"breakdown_s", step_parts_json(p.part_s)},
        {"mem_peak_bytes", p.mem_peak_bytes},
        {"mem_capacity_bytes", p.mem_capacity_bytes}};
    jp["breakdown_s"]["comm_exposed_parts"] = parts_json(p.comm_part_s, p.comm_unattributed_s);
    jp["runs"] = nlohmann::json::array();
    for (size_t i : p.runs) jp["runs"].push_back(c.runs[i].dir);
    out.push_back(jp);
  }
  return out;
}

nlohmann::json series_json(const Campaign& c) {
  nlohmann::json out;
  out = nlohmann::json::array();
  for (auto& s : c.series) {
    nlohmann::json js = {{"model", s.model},         {"layout", s.layout},
                         {"kind", s.kind},           {"checkpoint_variant", s.ckpt_variant},
                         {"base_gpus", s.base_gpus}, {"points", s.points}};
    js["efficiency"] = nlohmann::json::array();
    js["efficiency_min"] = nlohmann::json::array();
    js["efficiency_max"] = nlohmann::json::array();
    js["gpus"] = nlohmann::json::array();
    for (size_t k = 0; k < s.points.size(); ++k) {
      js["efficiency"].push_back(s.efficiency[k].med);
      js["efficiency_min"].push_back(s.efficiency[k].lo);
      js["efficiency_max"].push_back(s.efficiency[k].hi);
      js["gpus"].push_back(c.points[s.points[k]].gpus);
    }
    js["runs"] = nlohmann::json::array();
    for (size_t pi : s.points)
      for (size_t i : c.points[pi].runs) js["runs"].push_back(c.runs[i].dir);
    out.push_back(js);
  }
  return out;
}
}  // namespace

Written write_campaign_outputs(const Campaign& c, const std::string& out_dir, bool plots) {
  make_dir(out_dir);
  Written w;
  emit(out_dir, "campaign.csv", campaign_csv(c), w);
  const CkptStudy study = checkpoint_study(c, c.mtbf_s, c.storage_json);
  nlohmann::json j;
  j["runs"] = nlohmann::json::array();
  for (auto& r : c.runs) j["runs"].push_back(run_to_json(r));
  const auto sp = spread_json;
  j["points"] = points_json(c);
  j["series"] = series_json(c);
  if (!c.campaign_peak_source.empty())
    j["campaign_peak"] = {{"flops", c.campaign_peak}, {"source", c.campaign_peak_source}};
  if (!study.empty()) {
    nlohmann::json ck;
    ck["optimal"] = nlohmann::json::array();
    for (const auto& x : study.optimal)
      ck["optimal"].push_back({{"ranks", x.gpus},
                               {"mode", x.mode},
                               {"mtbf_s", x.mtbf_s},
                               {"cost_s", x.cost_s},
                               {"steady_checkpoints", x.steady_n},
                               {"first_checkpoint_cost_s", x.first_cost_s},
                               {"persist_s", x.persist_s},
                               {"restore_s", x.restore_s},
                               {"young_s", x.young_s},
                               {"daly_s", x.daly_s},
                               {"interval_s", x.interval_s},
                               {"interval_steps", x.steps},
                               {"expected_loss", x.waste}});
    ck["points"] = nlohmann::json::array();
    for (const auto& k : study.points)
      ck["points"].push_back({{"ranks", k.gpus},
                              {"mode", k.mode},
                              {"interval", k.interval},
                              {"overhead", sp(k.overhead)},
                              {"cost_s", k.cost_s},
                              {"persist_s", k.persist_s},
                              {"first_checkpoint_cost_s", k.first_cost_s},
                              {"steady_checkpoints", k.steady_n},
                              {"steady_checkpoints_min_per_run", k.steady_min_run},
                              {"aggregate_write_Bps", k.agg_bw},
                              {"node_write_Bps", k.node_Bps},
                              {"probed_write_Bps", k.probed_write_Bps},
                              {"bytes", k.bytes}});
    ck["notes"] = study.notes;
    ck["restore_s"] = nlohmann::json::array();
    for (const auto& [g, r] : study.restore_s)
      ck["restore_s"].push_back({{"ranks", g}, {"load_s", sp(r)}});
    ck["restore_rate"] = nlohmann::json::array();
    for (const auto& r : study.restore_rate)
      ck["restore_rate"].push_back({{"ranks", r.gpus},
                                    {"nodes", r.nodes},
                                    {"bytes", r.bytes},
                                    {"restore_s", r.restore_s},
                                    {"node_read_Bps", r.node_Bps},
                                    {"probed_read_Bps", r.probed_read_Bps}});
    if (study.storage.measured)
      ck["storage"] = {{"bytes", study.storage.bytes},
                       {"seconds", study.storage.seconds},
                       {"bandwidth_Bps", study.storage.bandwidth},
                       {"method", study.storage.method}};
    j["checkpoint_study"] = ck;
  }
  j["warnings"] = c.warnings;
  if (plots) {
    plots_into(out_dir, campaign_plots(c), w);
    plots_into(out_dir, ckpt_plots(study), w);
  }
  emit(out_dir, "campaign.json",
       j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", w);
  emit(out_dir, "report.md", campaign_markdown(c, w), w);
  return w;
}

}  // namespace st::analysis
