// Helpers for end-to-end tests: run the real scaletrain binary (under
// mpiexec for several ranks), capture its output and exit status, and read
// the loss curve back from a rank's telemetry file.
#pragma once
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace st::test {

struct RunResult {
  int exit_code = -1;    // -1: did not exit normally
  int term_signal = 0;   // signal that killed it, if any
  std::string output;    // stdout + stderr
  double seconds = 0;    // wall time
};

inline std::string env_or(const char* n, const char* d) {
  const char* v = std::getenv(n);
  return v ? v : d;
}
inline std::string bin() { return env_or("SCALETRAIN_BIN", "scaletrain"); }
inline std::string src_dir() { return env_or("SCALETRAIN_SOURCE_DIR", "."); }
inline std::string mpiexec() { return env_or("SCALETRAIN_MPIEXEC", "mpiexec"); }

inline RunResult run_cmd(const std::string& cmd) {
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.term_signal = WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// scaletrain on `ranks` ranks (1: no mpiexec) with extra arguments.
inline RunResult run_scaletrain(int ranks, const std::string& args) {
  std::string cmd;
  if (ranks > 1)
    cmd = mpiexec() + " --oversubscribe --bind-to none -n " + std::to_string(ranks) + " ";
  return run_cmd(cmd + bin() + " " + args);
}

inline std::string fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("scaletrain-e2e-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Per-step values of `field` from rank `rank`'s telemetry, in step order.
inline std::vector<double> read_series(const std::string& run, int rank, const std::string& field) {
  char name[64];
  std::snprintf(name, sizeof name, "/telemetry/rank_%05d.jsonl", rank);
  std::ifstream in(run + name);
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("type", "") != "step") continue;
    out.push_back(j.at(field).get<double>());
  }
  return out;
}
}  // namespace st::test
