// Implementation of gpu_rates.hpp.
#include "planner/gpu_rates.hpp"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st::plan {

std::vector<GemmShape> default_gemm_shapes() {
  std::vector<GemmShape> v;
  for (int64_t s : {256, 512, 1024, 2048, 4096, 8192}) v.push_back({s, 8192, 8192});
  return v;
}

std::vector<GemmRate> measure_gemm(const std::string& bench, const std::vector<GemmShape>& shapes,
                                   int iters, std::ostream& log) {
  std::vector<GemmRate> out;
  for (const auto& [m, n, k] : shapes) {
    const std::string cmd = bench + " " + std::to_string(m) + " " + std::to_string(n) + " " +
                            std::to_string(k) + " " + std::to_string(iters) + " 2>&1";
    std::FILE* p = popen(cmd.c_str(), "r");
    if (!p) throw UsageError("calibrate-gpu: cannot run '" + cmd + "'");
    std::string text;
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, got);
    const int st = pclose(p);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code == 77)
      throw UsageError("calibrate-gpu: no GPU visible to '" + bench + "': " + text +
                       "(run it on the GPU machine the cluster file describes)");
    const std::string key = "bf16_gemm_tflops=";
    const auto at = text.rfind(key);
    double tflops = 0;
    if (code == 0 && at != std::string::npos) {
      try {
        tflops = std::stod(text.substr(at + key.size()));
      } catch (const std::logic_error&) {
      }
    }
    if (code != 0 || !(tflops > 0))
      throw UsageError("calibrate-gpu: '" + cmd + "' exited " + std::to_string(code) +
                       " without a positive " + key + " line:\n" + text);
    log << "calibrate-gpu: gemm " << m << "x" << n << "x" << k << ": " << tflops << " TFLOP/s\n";
    out.push_back({double(m), double(n), double(k), tflops * 1e12});
  }
  return out;
}

namespace {

bool top_level(const std::string& l) { return !l.empty() && l[0] != ' ' && l[0] != '#'; }
size_t indent(const std::string& l) { return l.find_first_not_of(' '); }
bool blank(const std::string& l) { return indent(l) == std::string::npos; }
std::string quoted(const std::string& v) {
  std::string o = "\"";
  for (char ch : v) o += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
  return o + "\"";
}

}  // namespace

std::string splice_gemm_rates(const std::string& base_text, const std::vector<GemmRate>& gemm,
                              const std::map<std::string, std::string>& calibrated) {
  std::vector<std::string> in = split(base_text, '\n'), o;
  if (!in.empty() && in.back().empty()) in.pop_back();
  std::vector<std::string> block = {
      "  # bf16 GEMM: measured on this machine by calibrate-gpu "
      "(`calibrated:` below says how)",
      "  gemm:"};
  for (const auto& g : gemm) {
    std::ostringstream e;
    e << "    - {m: " << std::llround(g.m) << ", n: " << std::llround(g.n)
      << ", k: " << std::llround(g.k) << ", tflops: " << g.flops / 1e12 << "}";
    block.push_back(e.str());
  }
  bool in_rates = false, placed = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& l = in[i];
    if (top_level(l)) {
      if (in_rates && !placed) o.insert(o.end(), block.begin(), block.end()), placed = true;
      in_rates = l.rfind("rates:", 0) == 0;
      if (l.rfind("calibrated:", 0) == 0) {  // replaced below; skip its entries
        while (i + 1 < in.size() && !top_level(in[i + 1])) ++i;
        continue;
      }
    }
    if (in_rates && !placed && !blank(l) && indent(l) == 2 && l.rfind("  gemm:", 0) == 0) {
      // The published table's citation (the comment lines just above) goes
      // with it; its entries are the deeper lines after it.
      while (!o.empty() && indent(o.back()) == 2 && o.back()[2] == '#') o.pop_back();
      while (i + 1 < in.size() && !blank(in[i + 1]) && indent(in[i + 1]) > 2) ++i;
      o.insert(o.end(), block.begin(), block.end());
      placed = true;
      continue;
    }
    o.push_back(l);
  }
  if (in_rates && !placed) o.insert(o.end(), block.begin(), block.end()), placed = true;
  if (!placed) {
    o.push_back("rates:");
    o.insert(o.end(), block.begin(), block.end());
  }
  o.push_back("calibrated:");
  for (const auto& [k, v] : calibrated) o.push_back("  " + k + ": " + quoted(v));
  std::string text;
  for (const auto& l : o) text += l + "\n";
  return text;
}

void calibrate_gpu(const std::string& base, const std::string& out, const std::string& bench,
                   const std::string& command, std::ostream& log) {
  const Cluster c = load_cluster(base);
  if (!c.gpu()) throw UsageError("calibrate-gpu --cluster " + base + ": not a kind: gpu file");
  const std::vector<GemmRate> gemm = measure_gemm(bench, default_gemm_shapes(), 20, log);
  std::map<std::string, std::string> meta = c.meta;
  meta["gemm_rates"] = "measured by " + bench + " (calibrate-gpu)";
  meta["other_rates"] = "attention and busbw as in " + base + " (its comments cite them)";
  meta["command"] = command;
  meta["date"] = iso_time_utc();
  // The base file's text with the gemm table replaced, so its comments (the
  // sources of every other figure) stay; read back before it counts.
  write_file_atomic(out, splice_gemm_rates(read_file(base), gemm, meta));
  const Cluster back = load_cluster(out);
  ST_CHECK(back.rates.gemm.size() == gemm.size(), "calibrate-gpu: ", out, " reads back ",
           back.rates.gemm.size(), " GEMM rates, not ", gemm.size());
  log << "calibrate-gpu: wrote " << out << " (" << gemm.size() << " GEMM rates)\n";
}

}  // namespace st::plan
