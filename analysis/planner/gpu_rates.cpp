// Implementation of gpu_rates.hpp.
#include "planner/gpu_rates.hpp"

#include <sys/wait.h>

#include <cstdio>
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

void calibrate_gpu(const std::string& base, const std::string& out, const std::string& bench,
                   const std::string& command, std::ostream& log) {
  Cluster c = load_cluster(base);
  if (!c.gpu()) throw UsageError("calibrate-gpu --cluster " + base + ": not a kind: gpu file");
  c.rates.gemm = measure_gemm(bench, default_gemm_shapes(), 20, log);
  c.meta["gemm_rates"] = "measured by " + bench + " (calibrate-gpu)";
  c.meta["other_rates"] = "attention and busbw as in " + base + " (its comments cite them)";
  c.meta["command"] = command;
  c.meta["date"] = iso_time_utc();
  write_file_atomic(out, cluster_to_yaml(c));
  log << "calibrate-gpu: wrote " << out << " (" << c.rates.gemm.size() << " GEMM rates)\n";
}

}  // namespace st::plan
