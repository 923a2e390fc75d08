// Implementation of mpt_fit.hpp.
#include "planner/mpt_fit.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/util.hpp"
#include "plan/time_model.hpp"
#include "planner/csv.hpp"

namespace fs = std::filesystem;

namespace st::plan {
namespace {

std::string group_of(const MptRow& r) { return r.precision == "amp_fp8" ? r.gpu + " fp8" : r.gpu; }

}  // namespace

std::vector<MptRow> read_mpt_rows(const std::string& bench, const std::string& models) {
  const Csv m = load_csv(models);
  std::map<std::string, std::pair<int, int>> shape;
  for (size_t i = 0; i < m.rows.size(); ++i)
    shape[m.at(i, "model")] = {int(m.num(i, "n_layers")), int(m.num(i, "d_model"))};
  const Csv b = load_csv(bench);
  std::vector<MptRow> out;
  for (size_t i = 0; i < b.rows.size(); ++i) {
    MptRow r;
    r.line = b.rows[i].first;
    r.table = b.at(i, "table");
    r.model = b.at(i, "model");
    r.gpu = b.at(i, "gpu");
    r.precision = b.at(i, "precision");
    r.mp_mode = b.at(i, "mp_mode");
    r.seq_len = int(b.num(i, "seq_len"));
    r.gpus = int(b.num(i, "gpus"));
    r.micro_batch = int(b.num(i, "micro_batch"));
    r.grad_accum = int(b.num(i, "grad_accum"));
    r.act_ckpt = b.at(i, "act_ckpt") == "True";
    r.tok_s_gpu = b.num(i, "throughput_tok_s_gpu");
    r.mfu = b.num(i, "mfu");
    auto it = shape.find(r.model);
    if (it == shape.end())
      throw UsageError(bench + ":" + std::to_string(r.line) + ": model '" + r.model +
                       "' is not in " + models);
    r.n_layers = it->second.first;
    r.d_model = it->second.second;
    out.push_back(r);
  }
  return out;
}

Config mpt_config(const MptRow& r) {
  Config c;
  auto& m = c.model;
  m.name = "mpt-" + r.model;
  m.n_layers = r.n_layers;
  m.d_model = r.d_model;
  m.n_heads = r.d_model % 128 == 0 ? r.d_model / 128 : r.d_model / 64;
  m.n_kv_heads = m.n_heads;
  m.ffn_hidden = (8 * r.d_model / 3 + 63) / 64 * 64;
  m.vocab_size = 50368;
  m.seq_len = r.seq_len;
  auto& p = c.parallel;
  p.dp = r.gpus;
  p.zero_stage = 3;
  p.dp_bucket_mb = 1e6;  // FSDP wraps each block: one gather / reduce-scatter per layer
  p.grad_reduce_dtype = r.mp_mode == "PURE" ? "bf16" : "fp32";
  c.train.micro_batch = r.micro_batch;
  c.train.grad_accum = r.grad_accum;
  c.train.act_ckpt = r.act_ckpt ? "full" : "none";
  c.train.precision = "bf16";
  c.runtime.device = "cuda";
  return c;
}

double MptGroup::mape(const std::vector<const MptRow*>& rows, int single) const {
  return mape_of(pred, rows, single);
}

double MptGroup::mape_of(const std::map<const MptRow*, double>& p,
                         const std::vector<const MptRow*>& rows, int single) const {
  if (p.empty()) return std::nan("");
  double s = 0;
  int n = 0;
  for (const MptRow* r : rows) {
    if (single == 1 && r->gpus > cluster.devices_per_node) continue;
    if (single == 0 && r->gpus <= cluster.devices_per_node) continue;
    s += std::abs(p.at(r) / r->tok_s_gpu - 1);
    ++n;
  }
  return n ? s / n : std::nan("");
}

std::vector<double> minimise_positive(const std::function<double(const std::vector<double>&)>& f,
                                      std::vector<double> x0, int iterations) {
  const size_t n = x0.size();
  auto g = [&](const std::vector<double>& y) {
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = std::exp(y[i]);
    return f(x);
  };
  std::vector<std::vector<double>> p(n + 1, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i) p[0][i] = std::log(x0[i]);
  for (size_t k = 1; k <= n; ++k) {
    p[k] = p[0];
    p[k][k - 1] += 0.3;
  }
  std::vector<double> v(n + 1);
  for (size_t k = 0; k <= n; ++k) v[k] = g(p[k]);
  for (int it = 0; it < iterations; ++it) {
    std::vector<size_t> o(n + 1);
    for (size_t k = 0; k <= n; ++k) o[k] = k;
    std::sort(o.begin(), o.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<std::vector<double>> q;
    std::vector<double> w;
    for (size_t k : o) q.push_back(p[k]), w.push_back(v[k]);
    p = q, v = w;
    std::vector<double> c(n, 0);
    for (size_t k = 0; k < n; ++k)
      for (size_t i = 0; i < n; ++i) c[i] += p[k][i] / double(n);
    auto along = [&](double t) {
      std::vector<double> y(n);
      for (size_t i = 0; i < n; ++i) y[i] = c[i] + t * (p[n][i] - c[i]);
      return y;
    };
    const auto r = along(-1);
    const double fr = g(r);
    if (fr < v[0]) {
      const auto e = along(-2);
      const double fe = g(e);
      if (fe < fr)
        p[n] = e, v[n] = fe;
      else
        p[n] = r, v[n] = fr;
    } else if (fr < v[n - 1]) {
      p[n] = r, v[n] = fr;
    } else {
      const auto k = along(0.5);
      const double fk = g(k);
      if (fk < v[n]) {
        p[n] = k, v[n] = fk;
      } else {
        for (size_t j = 1; j <= n; ++j) {
          for (size_t i = 0; i < n; ++i) p[j][i] = p[0][i] + 0.5 * (p[j][i] - p[0][i]);
          v[j] = g(p[j]);
        }
      }
    }
  }
  size_t best = size_t(std::min_element(v.begin(), v.end()) - v.begin());
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = std::exp(p[best][i]);
  return x;
}

std::vector<MptGroup> mpt_fit(const std::vector<MptRow>& rows,
                              const std::map<std::string, std::string>& clusters,
                              const std::string& profile) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const MptRow*>> by;
  for (const MptRow& r : rows) {
    const std::string g = group_of(r);
    if (!by.count(g)) order.push_back(g);
    by[g].push_back(&r);
  }
  std::vector<MptGroup> out;
  for (const std::string& g : order) {
    MptGroup G;
    G.name = g;
    const std::string gpu = g.substr(0, g.find(' '));
    auto it = clusters.find(gpu);
    if (it == clusters.end()) throw UsageError("mpt-fit: no cluster file for GPU '" + gpu + "'");
    G.cluster = fitted_pricing(load_cluster(it->second), profile);
    if (g.find("fp8") != std::string::npos) {
      G.cluster.precision = "fp8";
      G.cluster.peak_flops *= 2;  // dense fp8 is twice bf16 on H100 (lib/metrics table)
      G.cluster.peak_source += " x2 (fp8)";
    }
    for (size_t i = 0; i < by[g].size(); ++i) (i % 2 == 0 ? G.fit : G.holdout).push_back(by[g][i]);
    // The hardware rates alone (efficiencies 1; bf16 figures, so not for the
    // fp8 type); then the fit, of fractions of those rates where the file has
    // them (of the peaks otherwise; fp8: peaks, the rates being bf16).
    if (G.cluster.precision == "fp8") G.cluster.rates = {};
    if (!G.cluster.rates.empty()) {
      Cluster hw = G.cluster;
      hw.eff.gemm = hw.eff.attention = hw.eff.network = hw.eff.network_intra = 1;
      for (const MptRow* r : by[g])
        G.rates_pred[r] = predict_step(mpt_config(*r), hw).tokens_per_s_device;
    }
    auto predict_all = [&](Cluster& cl) {
      for (const MptRow* r : by[g]) {
        G.parts[r] = predict_step(mpt_config(*r), cl);
        G.pred[r] = G.parts[r].tokens_per_s_device;
      }
    };
    auto objective = [&](const std::vector<double>& x) {
      Cluster cl = G.cluster;
      cl.eff.gemm = x[0], cl.eff.attention = x[1], cl.eff.network = x[2];
      if (x[0] > 1 || x[1] > 1 || x[2] > 4) return 1e9;
      double s = 0;
      for (const MptRow* r : G.fit)
        s += std::abs(predict_step(mpt_config(*r), cl).tokens_per_s_device / r->tok_s_gpu - 1);
      return s / double(G.fit.size());
    };
    // The same start for every type (not the file's values), so the fit is
    // reproducible whatever the cluster file holds.
    const auto x = minimise_positive(objective, {0.6, 0.4, 0.8}, 300);
    G.c[0] = x[0], G.c[1] = x[1], G.c[2] = x[2];
    G.cluster.eff.gemm = x[0], G.cluster.eff.attention = x[1], G.cluster.eff.network = x[2];
    predict_all(G.cluster);
    out.push_back(std::move(G));
  }
  return out;
}

void write_mpt_fit(const std::vector<MptGroup>& groups, const std::string& out_dir,
                   std::ostream& out) {
  auto pct = [](double v) {
    if (std::isnan(v)) return std::string("-");
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(1);
    o << 100 * v << "%";
    return o.str();
  };
  auto count = [](const std::vector<const MptRow*>& rows, int dpn, bool single) {
    int n = 0;
    for (auto* r : rows) n += single ? r->gpus <= dpn : r->gpus > dpn;
    return n;
  };
  std::ostringstream md, csv;
  md << "| GPU type | rows fit / held out | fitted gemm, attention, network | fit MAPE | held-out "
        "MAPE single node | held-out MAPE multi-node |\n|---|---|---|---|---|---|\n";
  csv << "line,group,model,seq_len,gpus,micro_batch,grad_accum,act_ckpt,half,tok_s_gpu,pred_tok_s_"
         "gpu,error,step_s,compute_s,exposed_comm_s\n";
  nlohmann::json j = nlohmann::json::array();
  for (const MptGroup& g : groups) {
    const int dpn = g.cluster.devices_per_node;
    std::ostringstream cs;
    cs.precision(3);
    cs << g.c[0] << ", " << g.c[1] << ", " << g.c[2];
    md << "| " << g.name << " (`" << fs::path(g.cluster.path).filename().string() << "`) | "
       << g.fit.size() << " / " << g.holdout.size() << " | " << cs.str() << " | "
       << pct(g.mape(g.fit, -1)) << " | " << pct(g.mape(g.holdout, 1)) << " ("
       << count(g.holdout, dpn, true) << " rows) | " << pct(g.mape(g.holdout, 0)) << " ("
       << count(g.holdout, dpn, false) << " rows) |\n";
    for (auto* half : {&g.fit, &g.holdout})
      for (const MptRow* r : *half)
        csv << r->line << ',' << g.name << ',' << r->model << ',' << r->seq_len << ',' << r->gpus
            << ',' << r->micro_batch << ',' << r->grad_accum << ',' << int(r->act_ckpt) << ','
            << (half == &g.fit ? "fit" : "holdout") << ',' << r->tok_s_gpu << ',' << g.pred.at(r)
            << ',' << g.pred.at(r) / r->tok_s_gpu - 1 << ',' << g.parts.at(r).step << ','
            << g.parts.at(r).compute() << ',' << g.parts.at(r).exposed_comm() << '\n';
    j.push_back({{"group", g.name},
                 {"cluster", g.cluster.path},
                 {"gemm", g.c[0]},
                 {"attention", g.c[1]},
                 {"network", g.c[2]},
                 {"fit_rows", g.fit.size()},
                 {"holdout_rows", g.holdout.size()},
                 {"fit_mape", g.mape(g.fit, -1)},
                 {"holdout_mape_single_node", g.mape(g.holdout, 1)},
                 {"holdout_mape_multi_node", g.mape(g.holdout, 0)}});
  }
  // All types together, per half and scale.
  double s1 = 0, s0 = 0;
  int n1 = 0, n0 = 0;
  for (const MptGroup& g : groups)
    for (const MptRow* r : g.holdout) {
      const double e = std::abs(g.pred.at(r) / r->tok_s_gpu - 1);
      if (r->gpus <= g.cluster.devices_per_node)
        s1 += e, ++n1;
      else
        s0 += e, ++n0;
    }
  md << "| all types | | | | " << pct(n1 ? s1 / n1 : std::nan("")) << " (" << n1 << " rows) | "
     << pct(n0 ? s0 / n0 : std::nan("")) << " (" << n0 << " rows) |\n";
  // The cluster files' hardware rates, no fit: every row of the type.
  for (const MptGroup& g : groups) {
    if (g.rates_pred.empty()) continue;
    std::vector<const MptRow*> all = g.fit;
    all.insert(all.end(), g.holdout.begin(), g.holdout.end());
    md << "\n"
       << g.name << " from `" << fs::path(g.cluster.path).filename().string()
       << "`'s hardware rates alone (no fit), all " << all.size() << " rows: MAPE "
       << pct(g.mape_of(g.rates_pred, all, -1)) << " (single node "
       << pct(g.mape_of(g.rates_pred, all, 1)) << ", multi-node "
       << pct(g.mape_of(g.rates_pred, all, 0)) << ")\n";
    for (auto& e : j)
      if (e["group"] == g.name) e["hardware_rates_mape"] = g.mape_of(g.rates_pred, all, -1);
  }
  out << md.str();
  if (out_dir.empty()) return;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  write_file_atomic(
      (fs::path(out_dir) / "mpt_fit.md").string(),
      "# Step-time model on the MPT tables: fit on even rows, predict odd rows\n\n" + md.str());
  write_file_atomic((fs::path(out_dir) / "mpt_fit.csv").string(), csv.str());
  write_file_atomic((fs::path(out_dir) / "mpt_fit.json").string(), j.dump(2) + "\n");
}

}  // namespace st::plan
