// `scaletrain-analyze mpt CSV MODELS_CSV`: recomputes MFU and HFU of the
// published MosaicML MPT benchmark rows with lib/metrics (MPT formulas, peak
// table) and prints the differences; a check that our numbers follow theirs.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "analyze/cli.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "metrics/metrics.hpp"

namespace st::analysis {
namespace {

struct Table {
  std::string path;
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;
  size_t col(const std::string& name) const {
    for (size_t i = 0; i < head.size(); ++i)
      if (head[i] == name) return i;
    throw UsageError(path + ":1: missing column '" + name + "'");
  }
};

Table read_table(const std::string& path) {
  Table t;
  t.path = path;
  std::ifstream f(path);
  if (!f) throw UsageError("cannot open '" + path + "'");
  std::string line;
  if (!std::getline(f, line)) throw UsageError(path + ": empty file");
  t.head = st::split_csv_line(line);
  int ln = 1;
  while (std::getline(f, line)) {
    ++ln;
    if (line.empty()) continue;
    auto v = st::split_csv_line(line);
    if (v.size() != t.head.size())
      throw UsageError(path + ":" + std::to_string(ln) + ": " + std::to_string(v.size()) +
                       " columns, header has " + std::to_string(t.head.size()));
    t.rows.push_back(v);
    t.lines.push_back(ln);
  }
  return t;
}

double num(const Table& t, size_t row, const std::string& c) {
  const std::string& v = t.rows[row][t.col(c)];
  try {
    size_t pos;
    double d = std::stod(v, &pos);
    if (pos == v.size()) return d;
  } catch (const std::logic_error&) {
  }
  throw UsageError(t.path + ":" + std::to_string(t.lines[row]) + ": field '" + c +
                   "': not a number: '" + v + "'");
}

}  // namespace

int mpt_check(const std::string& csv, const std::string& models_csv, const std::string& out_dir,
              std::ostream& out, double& worst_mfu, double& worst_hfu) {
  Table m = read_table(models_csv), b = read_table(csv);
  std::map<std::string, std::pair<int, int>> shape;
  for (size_t i = 0; i < m.rows.size(); ++i)
    shape[m.rows[i][m.col("model")]] = {int(num(m, i, "n_layers")), int(num(m, i, "d_model"))};
  std::ostringstream o;
  o << "line,model,gpus,gpu,precision,mfu_published,mfu,hfu_published,hfu\n";
  worst_mfu = worst_hfu = 0;
  int off = 0;
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const std::string model = b.rows[i][b.col("model")];
    auto it = shape.find(model);
    if (it == shape.end())
      throw UsageError(csv + ":" + std::to_string(b.lines[i]) + ": field 'model': '" + model +
                       "' not in " + models_csv);
    metrics::ModelShape s{int64_t(num(b, i, "num_params")), it->second.first, it->second.second, 0,
                          int(num(b, i, "seq_len"))};
    const std::string gpu = b.rows[i][b.col("gpu")], prec = b.rows[i][b.col("precision")];
    auto peak = metrics::peak_flops(gpu, prec);
    if (!peak)
      throw UsageError(csv + ":" + std::to_string(b.lines[i]) + ": no peak for gpu '" + gpu +
                       "' precision '" + prec + "'");
    const int gpus = int(num(b, i, "gpus"));
    const double seq_s = num(b, i, "throughput_tok_s") / s.seq_len;
    const bool ckpt = b.rows[i][b.col("act_ckpt")] == "True";
    const double mfu =
        100 * metrics::utilization(metrics::mpt_model_flops_per_seq(s), seq_s, gpus, peak->flops);
    const double hfu =
        100 * metrics::utilization(metrics::mpt_hw_flops_per_seq(s, ckpt ? "full" : "none"), seq_s,
                                   gpus, peak->flops);
    const double pm = num(b, i, "mfu"), ph = num(b, i, "hfu");
    worst_mfu = std::max(worst_mfu, std::fabs(mfu - pm));
    worst_hfu = std::max(worst_hfu, std::fabs(hfu - ph));
    if (std::fabs(mfu - pm) > 0.05 || std::fabs(hfu - ph) > 0.05) ++off;
    o << b.lines[i] << ',' << model << ',' << gpus << ',' << gpu << ',' << prec << ',' << pm << ','
      << mfu << ',' << ph << ',' << hfu << '\n';
  }
  if (!out_dir.empty()) std::ofstream(out_dir + "/mpt_check.csv") << o.str();
  out << b.rows.size() << " rows; worst |MFU - published| = " << worst_mfu
      << " points, worst |HFU - published| = " << worst_hfu << " points; " << off
      << " row(s) beyond 0.05 points\n";
  return off == 0 ? 0 : 1;
}

}  // namespace st::analysis
