// Per-run analysis (see run_summary.hpp): aligns the ranks' steps, picks the
// steady-state window, and computes throughput, MFU/HFU, shares and the two
// checkpoint-overhead estimates. Stragglers live in stragglers.cpp.
#include "analyze/run_summary.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "analyze/stats.hpp"
#include "core/error.hpp"
#include "metrics/metrics.hpp"

namespace st::analysis {

void compute_stragglers(const telemetry::RunTelemetry& run, const std::vector<int>& ranks,
                        const std::set<int64_t>& window, const Options& opt, RunSummary& s);

namespace {
std::string fmt_g(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

WindowSpec parse_window(const std::string& text, int64_t warmup) {
  WindowSpec w;
  w.warmup = warmup;
  auto bad = [&]() {
    return UsageError("--window: invalid value '" + text +
                      "' (valid: back-half, last:K, range:FIRST:LAST)");
  };
  if (text == "back-half") return w;
  try {
    if (text.rfind("last:", 0) == 0) {
      w.kind = WindowSpec::Kind::LastK;
      size_t pos;
      w.k = std::stoll(text.substr(5), &pos);
      if (pos != text.size() - 5 || w.k <= 0) throw bad();
      return w;
    }
    if (text.rfind("range:", 0) == 0) {
      w.kind = WindowSpec::Kind::Range;
      std::string r = text.substr(6);
      size_t c = r.find(':');
      if (c == std::string::npos) throw bad();
      size_t p1, p2;
      w.first = std::stoll(r.substr(0, c), &p1);
      w.last = std::stoll(r.substr(c + 1), &p2);
      if (p1 != c || p2 != r.size() - c - 1 || w.first > w.last) throw bad();
      return w;
    }
  } catch (const std::logic_error&) {
    throw bad();
  }
  throw bad();
}

std::string model_label(const telemetry::RunInfo& ri) {
  if (!ri.model_name.empty()) return ri.model_name;
  std::ostringstream os;
  os.precision(3);
  os << double(ri.n_params) / 1e9 << "B-L" << ri.n_layers << "-d" << ri.d_model;
  return os.str();
}

namespace {

// The steps every analysed rank recorded, aligned: index by step number,
// each rank's step_s, the slowest rank's stall and step time (the global
// step time of synchronous training) and the global tokens per step.
struct StepTable {
  std::vector<int64_t> steps;
  std::map<int64_t, size_t> idx;
  std::vector<std::vector<double>> per_rank;  // step_s per rank
  std::vector<double> stall_max, gstep;
  std::vector<int64_t> gtok;
  size_t size() const { return steps.size(); }
};

// Refuses a run with flagged ranks unless --allow-bad-ranks (and some rank is
// good); records what was left out.
void check_ranks(const telemetry::RunTelemetry& run, const Options& opt, RunSummary& s) {
  if (run.ok()) return;
  const auto flagged = run.flagged_ranks();
  const bool run_level = run.ranks.empty() || flagged.size() == run.ranks.size();
  if (!opt.allow_bad_ranks || run_level) {
    std::string msg;
    for (auto& e : run.errors) msg += e + "\n";
    if (!flagged.empty() && !run_level)
      msg += std::to_string(flagged.size()) +
             " rank(s) flagged; --allow-bad-ranks analyses the others and lists these";
    throw UsageError(msg);
  }
  s.flagged_ranks = flagged;
  s.errors = run.errors;
}

// What run.json says about the model, layout and checkpoint settings.
void copy_run_info(const telemetry::RunInfo& ri, RunSummary& s) {
  s.name = ri.name;
  s.model = model_label(ri);
  s.device = ri.device_name.empty() ? ri.device_kind : ri.device_name;
  s.precision = ri.precision;
  s.precision_choice = ri.precision_choice;
  s.act_ckpt = ri.act_ckpt;
  s.mem_capacity_bytes = ri.mem_capacity_bytes;
  s.mem_capacity_source = ri.mem_capacity_source;
  s.sharding = ri.zero_stage > 0 ? "ZeRO-" + std::to_string(ri.zero_stage) : "none";
  s.gpus = ri.world_size;
  s.seq_len = ri.seq_len;
  s.micro_batch = ri.micro_batch;
  s.grad_accum = ri.grad_accum;
  s.n_params = ri.n_params;
  s.n_layers = ri.n_layers;
  s.d_model = ri.d_model;
  s.n_heads = ri.n_heads;
  s.global_batch = ri.global_batch;
  s.global_batch_tokens = ri.global_batch_tokens;
  auto mesh = [&](const char* k) {
    auto it = ri.mesh.find(k);
    return it != ri.mesh.end() && it->second > 0 ? it->second : 1;
  };
  s.dp = mesh("dp");
  s.tp = mesh("tp");
  s.pp = mesh("pp");
  s.cp = mesh("cp");
  s.zero_stage = ri.zero_stage;
  s.nodes = std::max<int>(1, int(ri.hosts.size()));
  if (const auto c = ri.raw.find("config");
      c != ri.raw.end() && c->is_object() && c->contains("checkpoint")) {
    const auto& ck = (*c)["checkpoint"];
    if (ck.contains("interval") && ck["interval"].is_number_integer())
      s.ckpt_interval = ck["interval"].get<int>();
    if (s.ckpt_interval > 0 && ck.contains("mode") && ck["mode"].is_string())
      s.ckpt_mode = ck["mode"].get<std::string>();
  }
}

StepTable align_steps(const telemetry::RunTelemetry& run, const std::vector<int>& good,
                      RunSummary& s) {
  StepTable t;
  std::map<int64_t, int> count;
  for (int r : good)
    for (auto& st : run.ranks[r].steps) ++count[st.step];
  for (auto& [k, c] : count)
    if (c == int(good.size())) t.steps.push_back(k);
  if (count.size() != t.steps.size())
    s.warnings.push_back(std::to_string(count.size() - t.steps.size()) +
                         " step(s) missing on some ranks are left out of the analysis");
  ST_USAGE_CHECK(!t.steps.empty(), run.dir, ": no step recorded on every rank");
  for (size_t i = 0; i < t.steps.size(); ++i) t.idx[t.steps[i]] = i;
  const size_t n = t.size();
  t.per_rank.resize(n);
  t.stall_max.assign(n, 0.0);
  t.gtok.assign(n, 0);
  for (int r : good)
    for (auto& st : run.ranks[r].steps) {
      auto it = t.idx.find(st.step);
      if (it == t.idx.end()) continue;
      t.per_rank[it->second].push_back(st.step_s);
      t.stall_max[it->second] = std::max(t.stall_max[it->second], st.ckpt_stall_s);
      if (st.global_tokens > 0) t.gtok[it->second] = st.global_tokens;
      s.mem_peak_bytes = std::max(s.mem_peak_bytes, st.mem_peak_bytes);
    }
  // Global step time = slowest rank's step (synchronous training).
  t.gstep.resize(n);
  for (size_t i = 0; i < n; ++i) {
    t.gstep[i] = max_of(t.per_rank[i]);
    s.total_step_s += t.gstep[i];
  }
  return t;
}

// The window. The default is the trainer's own (metrics::steady_state, with
// the run's train.warmup_steps_excluded unless --warmup is given), so the
// report and the trainer's summary line agree.
std::set<int64_t> choose_window(const telemetry::RunTelemetry& run, const WindowSpec& w,
                                const StepTable& t, RunSummary& s) {
  const auto& ri = run.info;
  const auto& steps = t.steps;
  const size_t n = t.size();
  std::set<int64_t> win;
  int64_t warmup = w.warmup;
  if (!w.warmup_set) {
    const auto& cfg = ri.raw.contains("config") ? ri.raw["config"] : nlohmann::json();
    if (cfg.is_object() && cfg.contains("train") && cfg["train"].is_object() &&
        cfg["train"].contains("warmup_steps_excluded") &&
        cfg["train"]["warmup_steps_excluded"].is_number_integer())
      warmup = cfg["train"]["warmup_steps_excluded"].get<int64_t>();
  }
  ST_USAGE_CHECK(!w.warmup_set || w.kind == WindowSpec::Kind::Range || w.warmup < int64_t(n),
                 "--warmup ", w.warmup, ": ", run.dir, " recorded only ", n, " step(s) (",
                 steps.front(), "..", steps.back(), "); choose fewer than ", n, " warm-up steps");
  const int64_t warm = std::clamp<int64_t>(warmup, 0, int64_t(n) - 1);
  if (w.kind == WindowSpec::Kind::Range) {
    for (auto st : steps)
      if (st >= w.first && st <= w.last) win.insert(st);
    s.window_text =
        "steps " + std::to_string(w.first) + ".." + std::to_string(w.last) + " (fixed range)";
  } else if (w.kind == WindowSpec::Kind::LastK) {
    size_t b = n > size_t(w.k) ? n - size_t(w.k) : size_t(warm);
    b = std::max(b, size_t(warm));
    for (size_t i = b; i < n; ++i) win.insert(steps[i]);
    s.window_text = "last " + std::to_string(w.k) + " steps";
  } else {
    const auto ss = metrics::steady_state(t.gstep, warmup);
    for (size_t i = ss.first; i < ss.end; ++i) win.insert(steps[i]);
    s.window_text = metrics::steady_state_rule(ss.warmup);
  }
  ST_USAGE_CHECK(!win.empty(), run.dir, ": the window (", s.window_text,
                 ") holds no recorded step; steps recorded: ", steps.front(), "..", steps.back());
  s.win_first = *win.begin();
  s.win_last = *win.rbegin();
  s.win_n = int64_t(win.size());
  s.steps_total = int64_t(n);
  s.window_text = "steps " + std::to_string(s.win_first) + ".." + std::to_string(s.win_last) +
                  " (" + std::to_string(s.win_n) + " steps; " + s.window_text + "; median)";
  return win;
}

// Step time, tokens and CPU time over the window.
void throughput(const telemetry::RunTelemetry& run, const std::vector<int>& good,
                const std::set<int64_t>& win, const StepTable& t, RunSummary& s) {
  const auto& ri = run.info;
  {
    std::map<int64_t, std::vector<double>> cpu;  // window step -> the ranks' cpu_s
    for (int r : good)
      for (const auto& st : run.ranks[r].steps)
        if (win.count(st.step) && st.cpu_s > 0) cpu[st.step].push_back(st.cpu_s);
    std::vector<double> per_step;
    for (const auto& [step, v] : cpu) per_step.push_back(median(v));
    s.cpu_s_step = per_step.empty() ? 0 : median(per_step);
  }
  std::vector<double> wstep, wtok;
  for (size_t i = 0; i < t.size(); ++i)
    if (win.count(t.steps[i])) {
      wstep.push_back(t.gstep[i]);
      wtok.push_back(double(t.gtok[i] > 0 ? t.gtok[i] : ri.global_batch_tokens));
      s.step_s_window.push_back(t.gstep[i]);
    }
  s.step_p50 = median(wstep);
  ST_USAGE_CHECK(s.step_p50 > 0, run.dir, ": the median step time (step_s) of the window (",
                 s.window_text,
                 ") is 0: the telemetry holds no timing, so throughput and MFU "
                 "are undefined");
  s.step_p90 = percentile(wstep, 90);
  s.step_max = max_of(wstep);
  s.tokens_per_step = median(wtok);
  if (s.global_batch_tokens == 0) s.global_batch_tokens = int64_t(s.tokens_per_step);
  if (s.global_batch == 0 && s.seq_len > 0) s.global_batch = s.global_batch_tokens / s.seq_len;
  s.tok_s = s.step_p50 > 0 ? s.tokens_per_step / s.step_p50 : 0;
  s.tok_s_gpu = s.tok_s / std::max(1, s.gpus);
  s.seq_s = s.seq_len > 0 ? s.tok_s / s.seq_len : 0;
}

// MFU / HFU against the peak the options, the table or run.json give.
void utilization(const telemetry::RunInfo& ri, const Options& opt, RunSummary& s) {
  metrics::ModelShape m{ri.n_params, ri.n_layers, ri.d_model, ri.n_heads, ri.seq_len};
  if (opt.formula == FlopsFormula::Mpt) {
    s.formula = "MPT/llm-foundry: 3 x (2*N*T + 4*L*d*T^2) per sequence";
    s.model_flops_per_seq = metrics::mpt_model_flops_per_seq(m);
  } else {
    s.formula = "6N + 12*L*H*Q*T per token";
    s.model_flops_per_seq = metrics::flops_per_token_6n12lhqt(m) * double(ri.seq_len);
  }
  // Hardware FLOPs add the recomputation (lib/metrics, shared with scaletrain-plan).
  s.hw_flops_per_seq = metrics::hw_flops_per_seq(m, s.model_flops_per_seq, ri.act_ckpt);
  if (opt.peak_override > 0) {
    s.peak = opt.peak_override;
    s.peak_source = "--peak-flops " + fmt_g(opt.peak_override);
  } else if (auto p = metrics::peak_flops(ri.device_name, ri.precision)) {
    s.peak = p->flops;
    s.peak_source = "table: " + p->device + " " + p->precision + " (" + p->source + ")";
  } else if (ri.peak_flops > 0) {
    s.peak = ri.peak_flops;
    s.peak_source = "run.json device.peak_flops (" +
                    (ri.peak_source.empty() ? std::string("unspecified") : ri.peak_source) + ")";
  } else {
    s.peak_source = "none (device '" + ri.device_name + "' " + ri.precision +
                    " not in the table and run.json has no device.peak_flops; use --peak-flops)";
    s.warnings.push_back("MFU/HFU not computed: " + s.peak_source);
  }
  if (s.peak > 0) {
    s.mfu = 100 * metrics::utilization(s.model_flops_per_seq, s.seq_s, s.gpus, s.peak);
    s.hfu = 100 * metrics::utilization(s.hw_flops_per_seq, s.seq_s, s.gpus, s.peak);
  }
  s.model_tflops_gpu = s.model_flops_per_seq * s.seq_s / std::max(1, s.gpus) / 1e12;
}

// Shares of the step over the window, all analysed ranks: the window's
// fields summed, then split by the one rule (core/step_parts.hpp).
void step_shares(const telemetry::RunTelemetry& run, const std::vector<int>& good,
                 const std::set<int64_t>& win, RunSummary& s) {
  StepMeasured sum;
  double sum_comm = 0;
  std::array<double, kCommParts> wait{};
  for (int r : good)
    for (auto& st : run.ranks[r].steps)
      if (win.count(st.step)) {
        sum += st.measured();
        sum_comm += st.comm_s;
        for (size_t k = 0; k < wait.size(); ++k) wait[k] += st.comm_wait[k];
      }
  if (sum.step <= 0) return;
  const StepParts parts = split_step(sum);
  s.part_share = shares_of(parts, sum.step);
  s.comm_share = sum_comm / sum.step;
  // The comm part by CommPart: tp and cp as their waits inside the compute
  // (scaled down where the compute was shorter than them), comm_exposed_s
  // over the others (pp, dp, zero, other) in proportion to their waits.
  const double inside = sum.inline_waits;
  const double in_compute = parts[ix(StepPart::Comm)] - sum.comm_exposed;
  const double scale = inside > 0 ? in_compute / inside : 0;
  double rest = 0;
  for (CommPart p : kAllCommParts)
    if (p != CommPart::Tp && p != CommPart::Cp) rest += wait[ix(p)];
  for (CommPart p : kAllCommParts)
    s.comm_part_share[ix(p)] = p == CommPart::Tp || p == CommPart::Cp
                                   ? wait[ix(p)] * scale / sum.step
                               : rest > 0 ? sum.comm_exposed * (wait[ix(p)] / rest) / sum.step
                                          : 0;
  s.comm_unattributed_share = rest > 0 ? 0 : sum.comm_exposed / sum.step;
}

double num_field(const telemetry::EventRecord& ev, const char* k) {
  auto it = ev.fields.find(k);
  return it != ev.fields.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The checkpoint events: which steps saved, the commits' stalls, sizes and
// bandwidths (rank 0's node figures, the first analysed rank's own), the
// aggregate write bandwidth and the restore at start. Returns the stall each
// checkpoint step's commit events recorded (slowest rank).
std::map<int64_t, double> checkpoint_events(const telemetry::RunTelemetry& run,
                                            const std::vector<int>& good, std::set<int64_t>& ck,
                                            RunSummary& s) {
  std::map<int64_t, double> ev_stall;
  double write_s = 0, bytes = 0, bw = 0;
  std::vector<double> node_bps, of_disk;
  int commits = 0;
  // Aggregate write bandwidth: every rank's bytes of a checkpoint over the
  // slowest rank's write time, averaged over the checkpoints.
  std::map<int64_t, std::pair<double, double>> agg;  // step -> (bytes, max write_s)
  for (int r : good)
    for (auto& ev : run.ranks[r].events) {
      if ((ev.event == "ckpt_begin" || ev.event == "ckpt_commit") && ev.step >= 0)
        ck.insert(ev.step);
      // The restore at start: the slowest rank's load (every rank loads its
      // part), and its restore alone (load_s in records without it).
      if (ev.event == "ckpt_resume") {
        s.ckpt_load_s = std::max(s.ckpt_load_s, num_field(ev, "load_s"));
        s.ckpt_restore_s =
            std::max(s.ckpt_restore_s, num_field(ev, "restore_s") > 0 ? num_field(ev, "restore_s")
                                                                      : num_field(ev, "load_s"));
        s.ckpt_restore_bytes = std::max(s.ckpt_restore_bytes, num_field(ev, "bytes"));
      }
      if (ev.event != "ckpt_commit") continue;
      auto& a = agg[ev.step];
      a.first += ev.fields.value("bytes", 0.0);
      a.second = std::max(a.second, ev.fields.value("write_s", 0.0));
      ev_stall[ev.step] = std::max(ev_stall[ev.step], num_field(ev, "stall_s"));
      if (r == 0 && num_field(ev, "node_write_Bps") > 0) {
        node_bps.push_back(num_field(ev, "node_write_Bps"));
        of_disk.push_back(num_field(ev, "of_disk"));
      }
      if (r == good.front()) {
        write_s += num_field(ev, "write_s");
        bytes += num_field(ev, "bytes");
        bw += num_field(ev, "bandwidth_Bps");
        ++commits;
      }
    }
  double sb = 0, sbw = 0;
  for (auto& [k, a] : agg) {
    sb += a.first;
    sbw += a.second > 0 ? a.first / a.second : 0;
  }
  if (!agg.empty()) {
    s.ckpt_agg_bytes = sb / double(agg.size());
    s.ckpt_agg_bw = sbw / double(agg.size());
  }
  if (!node_bps.empty()) {
    s.ckpt_node_Bps = median(node_bps);
    s.ckpt_of_disk = median(of_disk);
  }
  if (run.info.raw.contains("storage")) s.storage = run.info.raw["storage"];
  if (commits > 0) {
    s.ckpt_write_s_mean = write_s / commits;
    s.ckpt_bytes_mean = bytes / commits;
    s.ckpt_bw_mean = bw / commits;
  }
  return ev_stall;
}

// The two overhead estimates: the stalls (instrumented) and each
// checkpoint's step-time excess.
void checkpoint_overheads(const StepTable& t, const std::map<int64_t, double>& ev_stall,
                          const Options& opt, RunSummary& s) {
  s.ckpt_stall_sum = sum_of(t.stall_max);
  s.ckpt_instr_source = "ckpt_stall_s of the step records (slowest rank per step)";
  if (s.ckpt_stall_sum == 0 && !ev_stall.empty()) {
    for (auto& [k, v] : ev_stall) s.ckpt_stall_sum += v;
    s.ckpt_instr_source = "stall_s of the ckpt_commit events (slowest rank per checkpoint)";
  }
  s.ckpt_overhead_instr = s.total_step_s > 0 ? s.ckpt_stall_sum / s.total_step_s : 0;
  // Step-time excess: slowest step among the checkpoint's own step and the K
  // after it (stopping before the next checkpoint), minus the window median.
  for (size_t c = 0; c < s.ckpt_steps.size(); ++c) {
    const int64_t a = s.ckpt_steps[c];
    int64_t b = a + opt.ckpt_k;
    if (c + 1 < s.ckpt_steps.size()) b = std::min(b, s.ckpt_steps[c + 1] - 1);
    double worst = 0;
    for (auto it = t.idx.lower_bound(a); it != t.idx.end() && it->first <= b; ++it)
      worst = std::max(worst, t.gstep[it->second]);
    const double ex = std::max(0.0, worst - s.step_p50);
    s.ckpt_excess.push_back(ex);
    s.ckpt_excess_sum += ex;
  }
  s.ckpt_overhead_excess = s.total_step_s > 0 ? s.ckpt_excess_sum / s.total_step_s : 0;
}

// The checkpoint cost in three parts: stall, background interference, persistence.
void checkpoint_parts(const telemetry::RunTelemetry& run, const std::vector<int>& good,
                      const StepTable& t, RunSummary& s) {
  std::map<int64_t, double> gs, gt, stall;
  for (size_t i = 0; i < t.size(); ++i) {
    gs[t.steps[i]] = t.gstep[i];
    stall[t.steps[i]] = t.stall_max[i];
  }
  for (int r : good) {
    const telemetry::RankClock& clk = run.ranks[size_t(r)].clock;
    for (const auto& st : run.ranks[size_t(r)].steps)
      if (t.idx.count(st.step)) {
        const double t0 = clk.to_rank0(st.t_start);
        auto [it, fresh] = gt.try_emplace(st.step, t0);
        it->second = std::min(it->second, t0);
      }
  }
  s.ckpt_cost = checkpoint_costs(run, good, gs, gt, stall, s.step_p50);
  double st_sum = 0;
  for (const auto& c : s.ckpt_cost) {
    st_sum += c.stall_s;
    s.ckpt_interference_s += c.interference_s;
    s.ckpt_persist_s += c.persist_s;
  }
  if (s.total_step_s > 0) {
    s.ckpt_stall_share = st_sum / s.total_step_s;
    s.ckpt_interference_share = s.ckpt_interference_s / s.total_step_s;
  }
}

// The per-step rows and the loss curves (training and validation).
void step_rows(const telemetry::RunTelemetry& run, const std::vector<int>& good,
               const std::set<int64_t>& win, const std::set<int64_t>& ck, const StepTable& t,
               RunSummary& s) {
  for (size_t i = 0; i < t.size(); ++i)
    s.steps.push_back({t.steps[i], t.gstep[i], median(t.per_rank[i]), t.stall_max[i],
                       t.gtok[i] > 0 ? t.gtok[i] : run.info.global_batch_tokens,
                       win.count(t.steps[i]) > 0, ck.count(t.steps[i]) > 0});
  // Loss: the same on every rank, so the first analysed rank's.
  for (auto& st : run.ranks[size_t(good.front())].steps)
    if (std::isfinite(st.loss)) s.loss.push_back({st.step, st.loss});
  for (auto& ev : run.ranks[size_t(good.front())].events)
    if (auto it = ev.fields.find("val_loss");
        ev.event == "eval" && ev.step >= 0 && it != ev.fields.end() && it->is_number())
      s.val_loss.push_back({ev.step, it->get<double>()});
}

}  // namespace

RunSummary summarize_run(const telemetry::RunTelemetry& run, const Options& opt) {
  RunSummary s;
  s.dir = run.dir;
  s.warnings = run.warnings;
  check_ranks(run, opt, s);
  copy_run_info(run.info, s);
  std::vector<int> good;
  for (int r = 0; r < int(run.ranks.size()); ++r)
    if (run.ranks[r].ok()) good.push_back(r);
  const StepTable t = align_steps(run, good, s);
  const std::set<int64_t> win = choose_window(run, opt.window, t, s);
  throughput(run, good, win, t, s);
  utilization(run.info, opt, s);
  step_shares(run, good, win, s);
  // Checkpoints: steps named by events, else steps that recorded a stall.
  std::set<int64_t> ck;
  const auto ev_stall = checkpoint_events(run, good, ck, s);
  if (ck.empty())
    for (size_t i = 0; i < t.size(); ++i)
      if (t.stall_max[i] > 0) ck.insert(t.steps[i]);
  s.ckpt_steps.assign(ck.begin(), ck.end());
  checkpoint_overheads(t, ev_stall, opt, s);
  checkpoint_parts(run, good, t, s);
  step_rows(run, good, win, ck, t, s);
  compute_stragglers(run, good, win, opt, s);
  return s;
}

}  // namespace st::analysis
