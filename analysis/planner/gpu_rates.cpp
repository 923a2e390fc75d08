// Implementation of gpu_rates.hpp.
#include "planner/gpu_rates.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/util.hpp"
#include "plan/recorded_step.hpp"

namespace st::plan {

std::vector<GemmShape> default_gemm_shapes() {
  std::vector<GemmShape> v;
  for (int64_t s : {256, 512, 1024, 2048, 4096, 8192}) v.push_back({s, 8192, 8192});
  return v;
}

std::vector<GemmShape> model_gemm_shapes(const Config& cfg, const std::vector<GemmShape>& skip) {
  auto sorted = [](GemmShape s) {
    std::sort(s.begin(), s.end());
    return s;
  };
  Config c = cfg;
  if (c.parallel.dp == 0) resolve_layout(c, c.parallel.tp * c.parallel.pp * c.parallel.cp);
  std::vector<GemmShape> seen, out;
  for (const GemmShape& s : skip) seen.push_back(sorted(s));
  for (const Op& op : step_ops(c)) {
    if (op.kind != OpKind::Gemm) continue;
    const GemmShape s{op.s[0], op.s[1], op.s[2]};
    if (std::find(seen.begin(), seen.end(), sorted(s)) != seen.end()) continue;
    seen.push_back(sorted(s));
    out.push_back(s);
  }
  return out;
}

namespace {

// Runs a shell command; its exit code and everything it printed.
std::pair<int, std::string> run(const std::string& cmd) {
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw UsageError("calibrate-gpu: cannot run '" + cmd + "'");
  std::string text;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, got);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, text};
}

}  // namespace

std::vector<GemmRate> measure_gemm(const std::string& bench, const std::vector<GemmShape>& shapes,
                                   int iters, std::ostream& log) {
  std::vector<GemmRate> out;
  for (const auto& [m, n, k] : shapes) {
    const std::string cmd = bench + " " + std::to_string(m) + " " + std::to_string(n) + " " +
                            std::to_string(k) + " " + std::to_string(iters);
    const auto [code, text] = run(cmd);
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

// The number after the last `key` in text (0 when absent or not a number).
double last_value(const std::string& text, const std::string& key) {
  const auto at = text.rfind(key);
  if (at == std::string::npos) return 0;
  try {
    return std::stod(text.substr(at + key.size()));
  } catch (const std::logic_error&) {
    return 0;
  }
}

}  // namespace

std::vector<AttnRate> parse_attention_bench(const std::string& text, const std::string& what,
                                            int hd, double T, bool blocks) {
  std::vector<AttnRate> out;
  auto row = [&](const std::string& prefix, double seq, const std::string& block) {
    const double f = last_value(text, prefix + "fwd_tflops="),
                 b = last_value(text, prefix + "bwd_tflops=");
    if (!(f > 0) || !(b > 0))
      throw UsageError(what + ": no positive " + prefix + "fwd_tflops= and " + prefix +
                       "bwd_tflops= lines in its output:\n" + text);
    out.push_back({hd, seq, f * 1e12, b * 1e12, block});
  };
  row("attn_", T, "causal");
  if (blocks) row("block_full_", T / 2, "full");
  return out;
}

std::vector<AttnRate> measure_attention(const std::string& bench, std::ostream& log, bool blocks) {
  std::vector<AttnRate> out;
  const int64_t hd = 128, heads = 16, tokens = 16384;  // FlashAttention-3's figures' setting
  for (int64_t T : {512, 1024, 2048, 4096, 8192, 16384}) {
    const std::string cmd = bench + (blocks ? " --block " : " ") + std::to_string(T) + " " +
                            std::to_string(hd) + " " + std::to_string(heads) + " " +
                            std::to_string(tokens) + " 20";
    const auto [code, text] = run(cmd);
    if (code == 77)
      throw UsageError("calibrate-gpu: no GPU visible to '" + bench + "': " + text +
                       "(run it on the GPU machine the cluster file describes)");
    if (code != 0)
      throw UsageError("calibrate-gpu: '" + cmd + "' exited " + std::to_string(code) + ":\n" +
                       text);
    for (const AttnRate& a :
         parse_attention_bench(text, "calibrate-gpu: '" + cmd + "'", int(hd), double(T), blocks)) {
      log << "calibrate-gpu: attention " << a.block << " seq " << a.seq << " head_dim " << hd
          << ": " << a.fwd_flops / 1e12 << " / " << a.bwd_flops / 1e12
          << " TFLOP/s forward / backward\n";
      out.push_back(a);
    }
  }
  return out;
}

MemoryBench parse_memory_bench(const std::string& text, const std::string& what) {
  MemoryBench m;
  for (const std::string& line : split(text, '\n')) {
    const auto b = line.find("mem_bytes="), g = line.find("mem_gbps=");
    if (b != std::string::npos && g != std::string::npos) {
      const double bytes = last_value(line.substr(b, g - b), "mem_bytes="),
                   gbps = last_value(line.substr(g), "mem_gbps=");
      if (!(bytes > 0) || !(gbps > 0))
        throw UsageError(what + ": '" + line + "': expected positive mem_bytes= and mem_gbps=");
      if (!m.memory.empty() && bytes <= m.memory.back().bytes)
        throw UsageError(what + ": '" + line + "': sizes must ascend");
      m.memory.push_back({bytes, gbps * 1e9});
    }
    if (const auto l = line.find("launch_us="); l != std::string::npos) {
      const double us = last_value(line.substr(l), "launch_us=");
      if (!(us >= 0) || us > 1e4)
        throw UsageError(what + ": '" + line + "': expected launch_us= in [0, 10000]");
      m.launch = us * 1e-6;
    }
  }
  if (m.memory.empty() || m.launch < 0)
    throw UsageError(what +
                     ": expected 'mem_bytes=<B> mem_gbps=<x>' lines and a 'launch_us=<x>' line "
                     "(scaletrain-bench-memory's output), got:\n" +
                     text);
  return m;
}

MemoryBench measure_memory(const std::string& bench, std::ostream& log) {
  const std::string cmd = bench + " 20";
  const auto [code, text] = run(cmd);
  if (code == 77)
    throw UsageError("calibrate-gpu: no GPU visible to '" + bench + "': " + text +
                     "(run it on the GPU machine the cluster file describes)");
  if (code != 0)
    throw UsageError("calibrate-gpu: '" + cmd + "' exited " + std::to_string(code) + ":\n" + text);
  MemoryBench m = parse_memory_bench(text, "calibrate-gpu: '" + cmd + "'");
  for (const MemRate& r : m.memory)
    log << "calibrate-gpu: elementwise " << r.bytes << " bytes: " << r.bw / 1e9 << " GB/s\n";
  log << "calibrate-gpu: launch " << m.launch * 1e6 << " us\n";
  return m;
}

std::vector<BusBw> parse_nccl_tests(const std::string& text, const std::string& what) {
  std::vector<BusBw> out;
  int col = -1, wrong = -1;  // data columns of the first (out-of-place) busbw and #wrong
  for (const std::string& line : split(text, '\n')) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    if (f.empty()) continue;
    if (f[0] == "#") {  // the header naming the columns: "#  size count type ... busbw #wrong"
      for (size_t i = 1; i < f.size() && col < 0; ++i)
        if (f[i] == "busbw")
          col = int(i) - 1, wrong = i + 1 < f.size() && f[i + 1] == "#wrong" ? int(i) : -1;
      continue;
    }
    if (col < 0 || int(f.size()) <= col) continue;
    double bytes = 0, bw = 0;
    try {
      size_t a = 0, b = 0;
      bytes = std::stod(f[0], &a);
      bw = std::stod(f[size_t(col)], &b);
      if (a != f[0].size() || b != f[size_t(col)].size()) continue;
    } catch (const std::logic_error&) {
      continue;  // not a row of the table
    }
    if (wrong >= 0 && wrong < int(f.size()) && f[size_t(wrong)] != "0" && f[size_t(wrong)] != "N/A")
      throw UsageError(what + ": " + f[size_t(wrong)] + " wrong results at " + f[0] +
                       " bytes; the collective is broken on this machine, not slow");
    if (bytes > 0 && bw > 0) out.push_back({bytes, bw * 1e9});
  }
  if (out.empty())
    throw UsageError(what +
                     ": no nccl-tests table (a '# ... busbw ...' header, then rows of "
                     "size ... busbw) in its output:\n" +
                     text);
  return out;
}

std::vector<BusBw> measure_busbw(const std::string& cmd, std::ostream& log) {
  const auto [code, text] = run(cmd);
  if (code != 0)
    throw UsageError("calibrate-gpu: '" + cmd + "' exited " + std::to_string(code) + ":\n" + text);
  std::vector<BusBw> v = parse_nccl_tests(text, "calibrate-gpu: '" + cmd + "'");
  log << "calibrate-gpu: " << v.size() << " busbw sizes from '" << cmd << "', "
      << v.back().busbw / 1e9 << " GB/s at " << v.back().bytes << " bytes\n";
  return v;
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

std::string splice_rates(const std::string& base_text, const std::vector<RatesTable>& tables,
                         const std::map<std::string, std::string>& calibrated) {
  std::vector<std::string> in = split(base_text, '\n'), o;
  if (!in.empty() && in.back().empty()) in.pop_back();
  auto block = [](const RatesTable& t) {
    if (!t.scalar.empty())
      return std::vector<std::string>{"  # " + t.comment, "  " + t.key + ": " + t.scalar};
    std::vector<std::string> b = {"  # " + t.comment, "  " + t.key + ":"};
    for (const auto& e : t.entries) b.push_back("    - " + e);
    return b;
  };
  std::vector<bool> placed(tables.size(), false);
  auto place_rest = [&] {
    for (size_t t = 0; t < tables.size(); ++t)
      if (!placed[t]) {
        const auto b = block(tables[t]);
        o.insert(o.end(), b.begin(), b.end());
        placed[t] = true;
      }
  };
  bool in_rates = false, had_rates = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& l = in[i];
    if (top_level(l)) {
      if (in_rates) place_rest();
      in_rates = l.rfind("rates:", 0) == 0;
      had_rates = had_rates || in_rates;
      if (l.rfind("calibrated:", 0) == 0) {  // replaced below; skip its entries
        while (i + 1 < in.size() && !top_level(in[i + 1])) ++i;
        continue;
      }
    }
    size_t t = tables.size();
    if (in_rates && !blank(l) && indent(l) == 2)
      for (size_t k = 0; k < tables.size(); ++k)
        if (l.rfind("  " + tables[k].key + ":", 0) == 0) t = k;
    if (t == tables.size()) {
      o.push_back(l);
      continue;
    }
    // The replaced table's citation (the comment lines just above) goes
    // with it; its entries are the deeper lines after it.
    while (!o.empty() && indent(o.back()) == 2 && o.back()[2] == '#') o.pop_back();
    while (i + 1 < in.size() && !blank(in[i + 1]) && indent(in[i + 1]) > 2) ++i;
    const auto b = block(tables[t]);
    o.insert(o.end(), b.begin(), b.end());
    placed[t] = true;
  }
  if (in_rates) place_rest();
  if (!had_rates) {
    o.push_back("rates:");
    place_rest();
  }
  o.push_back("calibrated:");
  for (const auto& [k, v] : calibrated) o.push_back("  " + k + ": " + quoted(v));
  std::string text;
  for (const auto& l : o) text += l + "\n";
  return text;
}

void calibrate_gpu(const std::string& base, const std::string& out, const std::string& bench,
                   const std::string& command, std::ostream& log, const std::string& nccl_intra,
                   const std::string& nccl_inter, const std::string& attn_bench,
                   const std::string& mem_bench, bool attn_blocks,
                   const std::vector<GemmShape>& model_shapes) {
  const Cluster c = load_cluster(base);
  if (!c.gpu()) throw UsageError("calibrate-gpu --cluster " + base + ": not a kind: gpu file");
  std::vector<RatesTable> tables;
  RatesTable g{"gemm",
               "bf16 GEMM: measured on this machine by calibrate-gpu (`calibrated:` says how)",
               {},
               ""};
  std::vector<GemmShape> shapes = default_gemm_shapes();
  shapes.insert(shapes.end(), model_shapes.begin(), model_shapes.end());
  for (const GemmRate& r : measure_gemm(bench, shapes, 20, log)) {
    std::ostringstream e;
    e << "{m: " << std::llround(r.m) << ", n: " << std::llround(r.n) << ", k: " << std::llround(r.k)
      << ", tflops: " << r.flops / 1e12 << "}";
    g.entries.push_back(e.str());
  }
  tables.push_back(g);
  std::map<std::string, std::string> meta = c.meta;
  meta["gemm_rates"] = "measured by " + bench + " (calibrate-gpu)";
  std::string kept;
  if (attn_bench.empty()) {
    kept = "attention";
  } else {
    RatesTable t{"attention",
                 attn_blocks ? "fused attention, causal and ring blocks (full): measured on this "
                               "machine (`calibrated:` says how)"
                             : "causal fused attention: measured on this machine (`calibrated:` "
                               "says how)",
                 {},
                 ""};
    for (const AttnRate& a : measure_attention(attn_bench, log, attn_blocks)) {
      std::ostringstream e;
      e << "{head_dim: " << a.head_dim << ", seq: " << std::llround(a.seq)
        << ", fwd_tflops: " << a.fwd_flops / 1e12 << ", bwd_tflops: " << a.bwd_flops / 1e12
        << (a.block == "causal" ? "" : ", block: " + a.block) << "}";
      t.entries.push_back(e.str());
    }
    tables.push_back(t);
    meta["attention_rates"] = "measured by " + attn_bench + " (calibrate-gpu)";
  }
  if (mem_bench.empty()) {
    kept += std::string(kept.empty() ? "" : ", ") + "memory, launch_us";
  } else {
    const MemoryBench m = measure_memory(mem_bench, log);
    RatesTable t{"memory",
                 "elementwise bandwidth by bytes moved: measured on this machine (`calibrated:` "
                 "says how)",
                 {},
                 ""};
    for (const MemRate& r : m.memory) {
      std::ostringstream e;
      e << "{bytes: " << std::llround(r.bytes) << ", gbps: " << r.bw / 1e9 << "}";
      t.entries.push_back(e.str());
    }
    tables.push_back(t);
    std::ostringstream l;
    l << m.launch * 1e6;
    tables.push_back({"launch_us", "per kernel launch: measured on this machine", {}, l.str()});
    meta["memory_rates"] = "measured by " + mem_bench + " (calibrate-gpu)";
  }
  for (const auto& [key, cmd] :
       {std::pair{"busbw_intra", nccl_intra}, {"busbw_inter", nccl_inter}}) {
    if (cmd.empty()) {
      kept += std::string(kept.empty() ? "" : ", ") + key;
      continue;
    }
    RatesTable t{
        key, "nccl-tests busbw: measured on this machine (`calibrated:` says how)", {}, ""};
    for (const BusBw& b : measure_busbw(cmd, log)) {
      std::ostringstream e;
      e << "{bytes: " << std::llround(b.bytes) << ", gbps: " << b.busbw / 1e9 << "}";
      t.entries.push_back(e.str());
    }
    tables.push_back(t);
    meta[std::string(key) + "_rates"] = "nccl-tests busbw (out-of-place) from: " + cmd;
  }
  if (!kept.empty()) meta["other_rates"] = kept + " as in " + base + " (its comments cite them)";
  meta["command"] = command;
  meta["date"] = iso_time_utc();
  // The base file's text with the measured tables replaced, so its comments
  // (the sources of every other figure) stay; read back before it counts.
  write_file_atomic(out, splice_rates(read_file(base), tables, meta));
  const Cluster back = load_cluster(out);
  ST_CHECK(back.rates.gemm.size() == g.entries.size(), "calibrate-gpu: ", out, " reads back ",
           back.rates.gemm.size(), " GEMM rates, not ", g.entries.size());
  log << "calibrate-gpu: wrote " << out << " (" << tables.size() << " measured tables)\n";
}

}  // namespace st::plan
