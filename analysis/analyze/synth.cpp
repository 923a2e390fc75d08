// Synthetic run writer (see synth.hpp). Lines are formatted with snprintf so
// the benchmark can write 512 ranks x 2000 steps quickly.
#include "analyze/synth.hpp"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "telemetry/paths.hpp"

namespace st::analysis {

double synth_ckpt_stall(const SynthSpec& s, int i) {
  if (s.ckpt_interval <= 0 || i % s.ckpt_interval != 0) return 0;
  const size_t k = size_t(i / s.ckpt_interval - 1);
  return k < s.ckpt_stalls.size() ? s.ckpt_stalls[k] : s.ckpt_stall;
}

double synth_step_time(const SynthSpec& s, int i) {
  double t = s.step_s;
  if (s.straggler_rank >= 0) t += s.straggler_extra * s.step_s;
  if (s.ckpt_interval > 0) {
    t += synth_ckpt_stall(s, i);
    if (i > s.ckpt_slow_offset && (i - s.ckpt_slow_offset) % s.ckpt_interval == 0)
      t += s.ckpt_slow_extra;
  }
  return t;
}

double synth_total_step_time(const SynthSpec& s) {
  double t = 0;
  for (int i = 1; i <= s.steps; ++i) t += synth_step_time(s, i);
  return t;
}

namespace {
void write_rank(const SynthSpec& s, int r, int64_t gbt) {
  const std::string path = telemetry::rank_telemetry_path(s.dir, r);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error("cannot write " + path);
  const int hosts = (s.world + s.ranks_per_host - 1) / s.ranks_per_host;
  nlohmann::json h = {{"type", "header"},
                      {"schema", "scaletrain.telemetry/1"},
                      {"run_name", s.model_name + "-n" + std::to_string(s.world)},
                      {"rank", r},
                      {"world_size", s.world},
                      {"local_rank", r % s.ranks_per_host},
                      {"local_size", s.ranks_per_host},
                      {"host", "node" + std::to_string(r / s.ranks_per_host)},
                      {"mesh", {{"dp", s.world}, {"tp", 1}, {"pp", 1}, {"cp", 1}}},
                      {"coords", {{"dp", r}, {"tp", 0}, {"pp", 0}, {"cp", 0}}},
                      {"device", s.device_kind == "cpu" ? "cpu" : "cuda:0"},
                      {"slurm_job_id", nullptr},
                      {"start_time", "2026-01-01T00:00:00Z"}};
  (void)hosts;
  std::string line = h.dump() + "\n";
  std::fputs(line.c_str(), f);
  const double S = s.step_s;
  const double jit = s.jitter * (double((r * 7919) % 101) / 100.0 - 0.5);
  double comp = 0.70 * S * (1.0 + jit);
  if (r == s.straggler_rank) comp += s.straggler_extra * S;
  const double data = 0.05 * S;
  const int64_t tokens = gbt / s.world;
  double t = 1.7e9;
  char buf[1024];
  for (int i = 1; i <= s.steps; ++i) {
    const double T = synth_step_time(s, i);
    const bool ck = s.ckpt_interval > 0 && i % s.ckpt_interval == 0;
    const double stall = synth_ckpt_stall(s, i);
    const double exposed = T - stall - data - comp;
    const double comm = exposed + 0.1 * S;
    char cpu_buf[48] = "";
    if (s.cpu_s > 0) std::snprintf(cpu_buf, sizeof cpu_buf, ",\"cpu_s\":%.9g", s.cpu_s);
    const std::string cpu = cpu_buf;
    if (ck) {
      std::snprintf(buf, sizeof buf,
                    "{\"type\":\"event\",\"event\":\"ckpt_begin\",\"step\":%d,\"t\":%.6f,"
                    "\"mode\":\"async\"}\n",
                    i, t);
      std::fputs(buf, f);
    }
    std::snprintf(
        buf, sizeof buf,
        "{\"type\":\"step\",\"step\":%d,\"t_start\":%.6f,\"step_s\":%.9g,\"data_s\":%.9g,"
        "\"fwd_s\":%.9g,\"bwd_s\":%.9g,\"optim_s\":%.9g,\"comm_s\":%.9g,\"comm_exposed_s\":%.9g,"
        "\"comm\":{\"all_reduce\":{\"s\":%.9g,\"bytes\":%lld,\"calls\":24}},\"ckpt_stall_s\":%.9g,"
        "\"tokens\":%lld,\"global_tokens\":%lld,\"loss\":%.6f,\"grad_norm\":%.6f,\"lr\":%.6g,"
        "\"mem_peak_bytes\":%lld,\"mem_bytes\":{\"params\":%lld,\"grads\":%lld,\"optim\":%lld,"
        "\"activations\":%lld}%s}\n",
        i, t, T, data, comp * 0.33, comp * 0.60, comp * 0.07, comm, exposed, comm,
        (long long)(2 * s.n_params), stall, (long long)tokens, (long long)gbt,
        10.0 / (1.0 + 0.01 * i), 1.0, 3e-4, (long long)(40e9 + 1e6 * r),
        (long long)(2 * s.n_params), (long long)(2 * s.n_params), (long long)(12 * s.n_params),
        (long long)(8e9), cpu.c_str());
    std::fputs(buf, f);
    if (ck) {
      std::snprintf(buf, sizeof buf,
                    "{\"type\":\"event\",\"event\":\"ckpt_commit\",\"step\":%d,\"t\":%.6f,"
                    "\"stall_s\":%.9g,\"snapshot_s\":%.9g,\"wait_prev_s\":0,\"write_s\":4.0,"
                    "\"bytes\":%lld,\"bandwidth_Bps\":%.6g,\"path\":\"checkpoints/step_%08d\"}\n",
                    i, t + T, stall, stall, (long long)(16 * s.n_params / s.world),
                    16.0 * s.n_params / s.world / 4.0, i);
      std::fputs(buf, f);
    }
    t += T;
  }
  std::fclose(f);
}
}  // namespace

void write_synthetic_run(const SynthSpec& s) {
  std::filesystem::create_directories(s.dir + "/telemetry");
  const int64_t gbt = s.global_batch_tokens > 0
                          ? s.global_batch_tokens
                          : int64_t(s.micro_batch) * s.grad_accum * s.seq_len * s.world;
  nlohmann::json hosts = nlohmann::json::array();
  for (int b = 0; b < s.world; b += s.ranks_per_host) {
    nlohmann::json rr = nlohmann::json::array();
    for (int r = b; r < std::min(s.world, b + s.ranks_per_host); ++r) rr.push_back(r);
    hosts.push_back({{"host", "node" + std::to_string(b / s.ranks_per_host)}, {"ranks", rr}});
  }
  nlohmann::json run = {{"schema", "scaletrain.run/1"},
                        {"name", s.model_name + "-n" + std::to_string(s.world)},
                        {"start_time", "2026-01-01T00:00:00Z"},
                        {"git_commit", "synthetic"},
                        {"version", "0.1.0"},
                        {"world_size", s.world},
                        {"hosts", hosts},
                        {"mesh", {{"dp", s.world}, {"tp", 1}, {"pp", 1}, {"cp", 1}}},
                        {"config",
                         {{"model", {{"preset", s.model_name}}},
                          {"train",
                           {{"micro_batch", s.micro_batch},
                            {"grad_accum", s.grad_accum},
                            {"act_ckpt", s.act_ckpt},
                            {"precision", s.precision},
                            {"steps", s.steps}}},
                          {"parallel", {{"zero_stage", 1}}}}},
                        {"model",
                         {{"n_params", s.n_params},
                          {"n_layers", s.n_layers},
                          {"d_model", s.d_model},
                          {"n_heads", s.n_heads},
                          {"n_kv_heads", s.n_heads},
                          {"seq_len", s.seq_len}}},
                        {"global_batch", gbt / s.seq_len},
                        {"global_batch_tokens", gbt},
                        {"device", {{"name", s.device_name}, {"kind", s.device_kind}}}};
  if (s.ckpt_interval > 0)
    run["config"]["checkpoint"] = {{"interval", s.ckpt_interval}, {"mode", "async"}};
  if (s.peak_flops > 0) {
    run["device"]["peak_flops"] = s.peak_flops;
    run["device"]["peak_source"] = "measured";
  }
  std::ofstream(s.dir + "/run.json") << run.dump(2) << "\n";
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, s.threads); ++t)
    pool.emplace_back([&]() {
      for (int r; (r = next.fetch_add(1)) < s.world;) write_rank(s, r, gbt);
    });
  for (auto& th : pool) th.join();
}

}  // namespace st::analysis
