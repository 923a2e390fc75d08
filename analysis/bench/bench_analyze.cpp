// Benchmark (not a test): writes a synthetic run of R ranks x S steps (default
// 512 x 2000), then times `scaletrain-analyze run` and `campaign` on it as child
// processes and prints wall time and peak RSS, plus the parse rate of one rank
// file with the flat step parser versus nlohmann_json in the same run.
// usage: scaletrain-analyze-bench [--ranks R] [--steps S] [--dir D] [--threads T]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "analyze/synth.hpp"
#include "telemetry/flatjson.hpp"
#include "telemetry/reader.hpp"

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs argv as a child; returns wall seconds and the child's peak RSS in MiB.
bool run_child(const std::vector<std::string>& argv, double& wall, double& rss_mib, int& rc) {
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  double t0 = now();
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) < 0) return false;
  wall = now() - t0;
  rss_mib = double(ru.ru_maxrss) / 1024.0;
  rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  int ranks = 512, steps = 2000, threads = 2;
  std::string dir = (std::filesystem::temp_directory_path() / "scaletrain-bench").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--ranks")
      ranks = std::atoi(argv[i + 1]);
    else if (k == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (k == "--dir")
      dir = argv[i + 1];
    else if (k == "--threads")
      threads = std::atoi(argv[i + 1]);
  }
  const std::string exe =
      (std::filesystem::canonical("/proc/self/exe").parent_path() / "scaletrain-analyze").string();
  const std::string run = dir + "/run_n" + std::to_string(ranks);
  std::filesystem::remove_all(dir);

  st::analysis::SynthSpec spec;
  spec.dir = run;
  spec.world = ranks;
  spec.steps = steps;
  spec.ranks_per_host = 8;
  spec.ckpt_interval = 100;
  spec.straggler_rank = ranks / 3;
  spec.threads = threads;
  double t0 = now();
  st::analysis::write_synthetic_run(spec);
  double gen_s = now() - t0;
  uintmax_t bytes = 0;
  for (auto& e : std::filesystem::directory_iterator(run + "/telemetry")) bytes += e.file_size();
  std::printf("generated %d ranks x %d steps: %.1f MiB of telemetry in %.2f s\n", ranks, steps,
              bytes / 1048576.0, gen_s);

  // Parse rate of one rank file, both parsers, same process.
  std::ifstream f(run + "/telemetry/rank_00000.jsonl");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string_view> lines;
  for (size_t b = 0; b < text.size();) {
    size_t e = text.find('\n', b);
    lines.emplace_back(text.data() + b, e - b);
    b = e + 1;
  }
  std::vector<st::telemetry::flat::Member> ms;
  const int reps = 5;
  t0 = now();
  size_t n_members = 0;
  for (int r = 0; r < reps; ++r)
    for (auto l : lines)
      n_members += st::telemetry::flat::parse_object(l, ms).empty() ? ms.size() : 0;
  double flat_s = (now() - t0) / reps;
  t0 = now();
  size_t n_json = 0;
  for (int r = 0; r < reps; ++r)
    for (auto l : lines) n_json += nlohmann::json::parse(l).size();
  double json_s = (now() - t0) / reps;
  t0 = now();
  auto rt = st::telemetry::read_rank_file(run + "/telemetry/rank_00000.jsonl");
  double reader_s = now() - t0;
  const double mib = text.size() / 1048576.0;
  std::printf(
      "one rank file (%.2f MiB, %zu lines): flat scanner %.1f MiB/s, nlohmann_json %.1f "
      "MiB/s (%.1fx), read_rank_file %.1f MiB/s [%zu/%zu members]\n",
      mib, lines.size(), mib / flat_s, mib / json_s, json_s / flat_s, mib / reader_s, n_members,
      n_json);
  (void)rt;

  for (const char* cmd : {"run", "campaign"}) {
    double wall, rss;
    int rc;
    std::vector<std::string> a = {exe, cmd, run, "--out", dir + "/analysis_" + cmd};
    if (!run_child(a, wall, rss, rc)) return 1;
    std::printf(
        "scaletrain-analyze %s (%d ranks x %d steps): rc=%d, wall %.2f s, peak RSS %.1f "
        "MiB\n",
        cmd, ranks, steps, rc, wall, rss);
  }
  std::printf("hardware threads: %u (reader uses all of them)\n",
              std::thread::hardware_concurrency());
  return 0;
}
