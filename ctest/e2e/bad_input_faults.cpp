// Bad-input rows, part 3: what an unlucky operator meets. Stop signals that
// reach the launcher rather than the ranks (Ctrl-C, kill), a rank that is
// stopped (not dead) during a checkpoint, a disk that fills up during a
// save, and runtime.device=cuda where there is no GPU.
#include <ctime>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "bad_input.hpp"

namespace fs = std::filesystem;

namespace st::test::bad {
namespace {

// scripts/launch.sh running a long 2-rank job, signalled after 3 steps.
std::string launched(Ctx& x, const std::string& sig, const std::string& target) {
  const std::string out = x.dir + "/run";
  return env_or("SCALETRAIN_PYTHON", "python3") + " " + src_dir() + "/ctest/e2e/signal_run.py " +
         out + "/telemetry/rank_00000.jsonl 3 " + sig + " " + target + " -- " + src_dir() +
         "/scripts/launch.sh --oversubscribe --bind-to none -n 2 " + bin() + quick(out) +
         " --set train.steps=100000";
}

// Seconds between the first output lines holding `from` and `to`, read from
// the UTC time that starts every log line (ISO 8601, whole seconds); -1 when
// either line is missing. Measured inside the run, so start-up on a loaded
// machine does not count.
double log_seconds_between(const std::string& out, const std::string& from, const std::string& to) {
  auto when = [&](const std::string& what) -> double {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.find(what) == std::string::npos) continue;
      std::tm tm{};
      if (line.size() < 20 || !strptime(line.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return -1;
      return double(timegm(&tm));
    }
    return -1;
  };
  const double a = when(from), b = when(to);
  return a < 0 || b < 0 ? -1 : b - a;
}

std::function<std::string(Ctx&, const RunResult&)> resumable() {
  return [](Ctx& x, const RunResult&) -> std::string {
    const auto steps = read_series(x.dir + "/run", 0, "loss").size();
    const std::string ckpt = x.dir + "/run/checkpoints/step_" + [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%08zu", steps);
      return std::string(b);
    }();
    return fs::exists(ckpt + "/index.json") ? "" : "no emergency checkpoint at " + ckpt;
  };
}

}  // namespace

std::vector<Case> fault_cases() {
  std::vector<Case> v;
  // Ctrl-C reaches the launcher's whole process group; kill reaches it alone.
  for (auto [sig, target, how] :
       {std::tuple{"INT", "group", "Ctrl-C (SIGINT to its process group)"},
        std::tuple{"TERM", "leader", "SIGTERM"}}) {
    Case c;
    c.name = std::string(how) + " to scripts/launch.sh";
    c.command = [sig = std::string(sig), target = std::string(target)](Ctx& x) {
      return launched(x, sig, target);
    };
    c.exit_code = 3;
    c.expect = {"SIG" + std::string(sig) + ": every rank writes an emergency checkpoint",
                "emergency checkpoint committed"};
    c.check = resumable();
    v.push_back(c);
  }
  {
    // Rank 1 stops (SIGSTOP) after writing its step-3 file, before the vote:
    // the message names it, and the job comes down after one timeout (8 s)
    // plus the watchdog's grace (2 s), not two timeouts (16 s).
    Case c;
    c.name = "a rank stopped during a checkpoint";
    c.command = [](Ctx& x) {
      return "SCALETRAIN_FAULT=stop:1:3:written " +
             trainer(2, quick(x.dir + "/run") + " --set train.steps=50 --set runtime.timeout_s=8");
    };
    c.exit_code = 1;
    c.expect = {"World rank 1 (host", "did not answer", "stopped, stuck outside MPI, or dead"};
    c.check = [](Ctx&, const RunResult& r) -> std::string {
      // From the step-3 line (the stop comes with that step's save) to the
      // abort's line; whole seconds, so 14 s parts one timeout from two.
      const double s = log_seconds_between(r.output, "step     3/", "timeout:");
      if (s < 0) return "no step-3 or timeout line in the output";
      return s < 14 ? ""
                    : "step 3 to the abort took " + std::to_string(s) + " s (2 timeouts: 16 s)";
    };
    c.alone = true;
    v.push_back(c);
  }
  {
    // A disk that fills up during a save (enospc_shim.c): the line that
    // reports the failed save starts with the system's reason, and
    // on_error=abort stops the run.
    Case c;
    c.name = "disk full during a save";
    c.command = [](Ctx& x) {
      return "SCALETRAIN_ENOSPC_PATH=/checkpoints/ LD_PRELOAD=" + std::string(ST_ENOSPC_SHIM) +
             " " + bin() + quick(x.dir + "/run") + " --set checkpoint.on_error=abort";
    };
    c.exit_code = 1;
    c.expect = {"checkpoint step 3"};
    c.check = [](Ctx&, const RunResult& r) -> std::string {
      // The line that reports the failed save carries the cause.
      size_t a = r.output.find("checkpoint step 3");
      if (a == std::string::npos) return "no failed save reported";
      size_t b = r.output.find('\n', a);
      const std::string line = r.output.substr(a, b - a);
      return line.find("No space left on device") != std::string::npos
                 ? ""
                 : "the cause is not on the first line: " + line;
    };
    v.push_back(c);
  }
  // The CUDA backend is a library loaded at run time: a missing or broken
  // one is a one-line error naming it, on every rank.
  for (int ranks : {1, 2})
    for (const char* kind : {"missing", "broken"}) {
      Case c;
      c.name =
          std::string("CUDA backend library ") + kind + ", " + std::to_string(ranks) + " rank(s)";
      const bool broken = std::string(kind) == "broken";
      c.command = [ranks, broken](Ctx& x) {
        fs::create_directories(x.dir + "/lib");
        if (broken) put(x.dir + "/lib/libscaletrain_cuda.so", "not an ELF file\n");
        return "SCALETRAIN_BACKEND_DIR=" + x.dir + "/lib " +
               trainer(ranks, tiny() + " --set runtime.device=cuda --set train.precision=bf16" +
                                  " --out " + x.dir + "/run");
      };
      c.expect = {"/lib/libscaletrain_cuda.so",
                  broken ? "cannot load the CUDA backend library" : "does not exist"};
      c.check = [](Ctx& x, const RunResult&) {
        return fs::exists(x.dir + "/run/run.json") ? "run.json was written" : "";
      };
      v.push_back(c);
    }
  {
    // With the real library (a CUDA build), what it cannot run is its refusal.
    Case c;
    c.name = "CUDA backend refuses fp32";
    c.command = [](Ctx&) {
      return trainer(1, tiny() + " --set runtime.device=cuda --set train.precision=fp32 --dry-run");
    };
    c.expect = {"train.precision=fp32", "train.precision=bf16"};
    c.skip_if = [] {
      return fs::exists(env_or("SCALETRAIN_BUILD_DIR", ".") + "/lib/libscaletrain_cuda.so")
                 ? ""
                 : "no CUDA backend library in this build";
    };
    v.push_back(c);
  }
  for (int ranks : {1, 2}) {
    Case c;
    c.name = "runtime.device=cuda without a GPU, " + std::to_string(ranks) + " rank(s)";
    c.command = [ranks](Ctx& x) {
      return trainer(ranks, tiny() + " --set runtime.device=cuda --set train.precision=bf16 " +
                                "--set train.steps=2 --out " + x.dir + "/run");
    };
    c.expect = {"runtime.device=cuda", "runtime.device=cpu"};
    c.check = [](Ctx& x, const RunResult&) {
      return fs::exists(x.dir + "/run/run.json") ? "run.json was written before the check" : "";
    };
    c.skip_if = [] { return run_cmd("nvidia-smi -L").exit_code == 0 ? "a GPU is visible" : ""; };
    v.push_back(c);
  }
  return v;
}

}  // namespace st::test::bad
