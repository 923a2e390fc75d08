// Checkpoints of the real trainer: resume is exact (bitwise on CPU fp32),
// resuming under another data-parallel layout reproduces the uninterrupted
// run (ZeRO 3, and dp x tp with ZeRO-sharded state, included), as does
// resuming under another pipeline split (even <-> uneven), a rank
// killed with SIGKILL mid-write leaves the previous committed step to resume
// from, a corrupted newest checkpoint is named and skipped, SIGUSR1 gives an
// emergency checkpoint that resumes exactly, h5py reads every tensor of a
// trainer checkpoint, and the start-up warning when an interval cannot hide
// a save's write is right in both directions.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "checkpoint/checkpoint.hpp"
#include "ckpt_util.hpp"
#include "run_util.hpp"
#include "tensor/dtype.hpp"

using namespace st::test;
namespace fs = std::filesystem;

namespace {
// No storage probe (checkpoint.probe_mb=0): these runs test saves and
// resumes, not the probe, which would write and read 3 x 64 MiB at every
// start (StartUpSaysWhenTheIntervalCannotHideAWrite runs it).
const std::string kTiny =
    " --set runtime.cpu_peak_gflops=1 --set checkpoint.interval=5 --set checkpoint.probe_mb=0";

std::string tiny(int steps, int ranks, int global_batch = 12) {
  return " --config " + src_dir() +
         "/configs/models/tiny.yaml --set train.steps=" + std::to_string(steps) +
         " --set train.micro_batch=" + std::to_string(global_batch / ranks) + kTiny;
}

// Every params/ and exp_avg*/ tensor of a committed step, read back whole.
std::map<std::string, std::vector<float>> read_all(const std::string& step_dir) {
  return read_checkpoint(step_dir);
}

std::string run_ok(int ranks, const std::string& args) {
  auto r = run_scaletrain(ranks, args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}
// 20 steps straight, and 10 then a resume to 20, both on 2 ranks with
// `args`: the loss curves and every tensor of the step-20 checkpoints are
// bitwise equal. Returns the step-20 tensors.
std::map<std::string, std::vector<float>> expect_bitwise_resume(const std::string& d,
                                                                const std::string& args) {
  run_ok(2, tiny(20, 2) + args + " --out " + d + "/straight");
  run_ok(2, tiny(20, 2) + args + " --set train.stop_after=10 --out " + d + "/resumed");
  auto out = run_ok(2, tiny(20, 2) + args + " --out " + d + "/resumed");
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  auto a = read_series(d + "/straight", 0, "loss");
  auto b = read_series(d + "/resumed", 0, "loss");
  EXPECT_EQ(a.size(), 20u);
  EXPECT_EQ(a, b);
  auto wa = read_all(d + "/straight/checkpoints/step_00000020");
  auto wb = read_all(d + "/resumed/checkpoints/step_00000020");
  EXPECT_EQ(wa.size(), wb.size());
  for (auto& [name, v] : wa) EXPECT_TRUE(v == wb[name]) << name << " differs after resume";
  return wa;
}

// A layout a run is saved or resumed under (dp sizes the micro-batch).
struct Layout {
  std::string name;
  int ranks, dp;
  std::string sets;
};
using ResumePlan = std::vector<std::pair<Layout, std::vector<Layout>>>;

// Each saving layout runs to step 10; a copy of its run resumes under each of
// its loading layouts, and the loss curve matches `ref` within `tol`
// (relative). `args` gives a layout's command line.
void expect_resumes(const std::string& d, const ResumePlan& plan,
                    const std::function<std::string(const Layout&)>& args,
                    const std::vector<double>& ref, double tol) {
  for (const auto& [save, loads] : plan) {
    const std::string saved = d + "/" + save.name;
    run_ok(save.ranks, args(save) + " --set train.stop_after=10 --out " + saved);
    ASSERT_TRUE(fs::exists(saved + "/checkpoints/step_00000010")) << save.name;
    for (const Layout& l : loads) {
      const std::string run = saved + "_to_" + l.name;
      fs::copy(saved, run, fs::copy_options::recursive);
      auto out = run_ok(l.ranks, args(l) + " --out " + run);
      EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
      auto got = read_series(run, 0, "loss");
      ASSERT_EQ(got.size(), ref.size()) << save.name << " -> " << l.name;
      for (size_t i = 0; i < ref.size(); ++i)
        EXPECT_LE(std::fabs(got[i] - ref[i]) / ref[i], tol)
            << "step " << i + 1 << ", saved by " << save.name << ", resumed by " << l.name;
    }
  }
}
}  // namespace

TEST(CheckpointE2E, ResumeIsBitwiseExactDp2) {
  const std::string d = fresh_dir("ckpt-exact");
  expect_bitwise_resume(d, "");  // bitwise: JSON keeps every digit of a double
  fs::remove_all(d);
}

TEST(CheckpointE2E, StagedSaveAndRestoreOnTheStrictDeviceResumeBitwise) {
  // The strict CPU device is not host-accessible: the checkpoint copies the
  // state into pinned buffers with copy_to_host, and the resume copies it up
  // with copy_from_host on worker-thread streams over NaN-filled memory (a
  // GPU's path). ZeRO-1 shards the moments, so each rank stages its rows.
  const std::string d = fresh_dir("ckpt-staged");
  expect_bitwise_resume(d, " --set runtime.strict_device=true --set parallel.zero_stage=1");
  fs::remove_all(d);
}

TEST(CheckpointE2E, ResumeUnderOtherLayouts) {
  // Saved by dp2 and by dp4 (different shardings of every tensor), resumed by
  // dp3 and dp1: the loss curve matches the uninterrupted dp1 run.
  const std::string d = fresh_dir("ckpt-reshard");
  run_ok(1, tiny(16, 1) + " --out " + d + "/ref");
  auto ref = read_series(d + "/ref", 0, "loss");
  ASSERT_EQ(ref.size(), 16u);
  const std::vector<std::pair<int, int>> save_load = {{2, 3}, {4, 1}};
  for (auto [s, l] : save_load) {
    const std::string run = d + "/s" + std::to_string(s) + "l" + std::to_string(l);
    run_ok(s, tiny(16, s) + " --set train.stop_after=10 --out " + run);
    auto out = run_ok(l, tiny(16, l) + " --out " + run);
    EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
    auto got = read_series(run, 0, "loss");
    ASSERT_EQ(got.size(), ref.size()) << "saved by dp" << s << ", resumed by dp" << l;
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LE(std::fabs(got[i] - ref[i]) / ref[i], 1e-6)
          << "step " << i + 1 << ", saved by dp" << s << ", resumed by dp" << l;
  }
  fs::remove_all(d);
}

TEST(CheckpointE2E, ZeroShardedStateResumesUnderOtherLayouts) {
  // ZeRO-3 (weights and moments sharded) and ZeRO-1 under dp2 x tp2 (row-
  // parallel wo/w2 blocks split along dim 1) save at step 10; copies of the
  // run resume under other layouts and ZeRO stages (ZeRO 0 dp2 <-> ZeRO 3
  // dp4 included). The loss curve matches
  // the uninterrupted 1-rank run within 1e-6.
  const std::string d = fresh_dir("ckpt-zero");
  auto args = [](const Layout& l) {
    return " --config " + src_dir() + "/configs/models/tiny.yaml --set train.steps=16" +
           " --set train.micro_batch=" + std::to_string(12 / l.dp) + kTiny + " " + l.sets;
  };
  run_ok(1, args({"ref", 1, 1, ""}) + " --out " + d + "/ref");
  auto ref = read_series(d + "/ref", 0, "loss");
  ASSERT_EQ(ref.size(), 16u);
  const std::string Z = "--set parallel.zero_stage=", TP2 = " --set parallel.tp=2";
  const ResumePlan plan = {
      {{"dp2_z3", 2, 2, Z + "3"}, {{"dp1_z0", 1, 1, ""}, {"dp2_z1", 2, 2, Z + "1"}}},
      {{"dp2tp2_z3", 4, 2, Z + "3" + TP2}, {{"dp4_z1", 4, 4, Z + "1"}, {"dp1_z0", 1, 1, ""}}},
      {{"dp2tp2_z1", 4, 2, Z + "1" + TP2}, {{"dp4_z1", 4, 4, Z + "1"}, {"dp1_z0", 1, 1, ""}}},
      // Replicated state to padded uniform ZeRO-3 shards and back.
      {{"dp2_z0", 2, 2, ""}, {{"dp4_z3", 4, 4, Z + "3"}}},
      {{"dp4_z3", 4, 4, Z + "3"}, {{"dp2_z0", 2, 2, ""}}},
  };
  expect_resumes(d, plan, args, ref, 1e-6);
  fs::remove_all(d);
}

TEST(CheckpointE2E, Bf16StateResumesBitwiseAndUnderOtherZeroStages) {
  // optim.state_dtype=bf16: the masters are the bf16 compute weights and the
  // moments bf16, saved widened to fp32. A resume on the strict device (the
  // staged copies a GPU makes) under ZeRO 1 is bitwise; the bf16 state
  // written by dp2 ZeRO 3 resumes under dp1 ZeRO 0 and dp2 ZeRO 1, with the
  // stochastic rounding keyed by tensor and position, not by shard, so the
  // curve stays within the bf16 runs' own dp1-vs-dp2 spread of the
  // uninterrupted dp1 run.
  const std::string d = fresh_dir("ckpt-bf16-state");
  const std::string bf = " --set train.precision=bf16 --set optim.state_dtype=bf16";
  const auto saved = expect_bitwise_resume(
      d, bf + " --set runtime.strict_device=true --set parallel.zero_stage=1");
  ASSERT_FALSE(saved.empty());
  for (auto& [name, v] : saved)  // saved from bf16: every value is exactly a bf16 value
    for (float x : v) ASSERT_EQ(x, st::round_bf16(x)) << name;
  auto args = [&](const Layout& l) {
    return " --config " + src_dir() + "/configs/models/tiny.yaml --set train.steps=16" +
           " --set train.micro_batch=" + std::to_string(12 / l.dp) + kTiny + bf + " " + l.sets;
  };
  run_ok(1, args({"ref", 1, 1, ""}) + " --out " + d + "/ref");
  run_ok(2, args({"dp2", 2, 2, ""}) + " --out " + d + "/dp2");
  auto ref = read_series(d + "/ref", 0, "loss"), dp2 = read_series(d + "/dp2", 0, "loss");
  ASSERT_EQ(ref.size(), 16u);
  ASSERT_EQ(dp2.size(), 16u);
  double spread = 0;  // bf16 compute: dp2 sums its gradients in another order
  for (size_t i = 0; i < ref.size(); ++i)
    spread = std::max(spread, std::fabs(dp2[i] - ref[i]) / ref[i]);
  EXPECT_LT(spread, 2e-2);
  std::printf("bf16 compute and state, dp2 against dp1: loss up to %.3g apart\n", spread);
  const std::string Z = "--set parallel.zero_stage=";
  const ResumePlan plan = {
      {{"dp2_z3", 2, 2, Z + "3"}, {{"dp1_z0", 1, 1, ""}, {"dp2_z1", 2, 2, Z + "1"}}},
  };
  expect_resumes(d, plan, args, ref, std::max(2 * spread, 1e-3));
  fs::remove_all(d);
}

TEST(CheckpointE2E, ResumeAcrossPipelineSplits) {
  // Checkpoints are layout-free, so the pipeline split may change at resume:
  // a 4-layer model saved at step 10 by pp2 with the even split (2+2) resumes
  // under an uneven one (3+1), and one saved under 1+3 resumes under the even
  // split and on one rank. The loss curve matches the uninterrupted 1-rank
  // run within 1e-5, the layout tests' fp32 tolerance (stages sum partial
  // results in another order).
  const std::string d = fresh_dir("ckpt-split");
  auto args = [](const Layout& l) {
    return " --config " + src_dir() +
           "/configs/models/tiny.yaml --set train.steps=16 --set model.n_layers=4" +
           " --set train.micro_batch=3 --set train.grad_accum=4" + kTiny + " " + l.sets;
  };
  run_ok(1, args({"ref", 1, 1, ""}) + " --out " + d + "/ref");
  auto ref = read_series(d + "/ref", 0, "loss");
  ASSERT_EQ(ref.size(), 16u);
  const std::string PP2 = "--set parallel.pp=2", L = " --set parallel.pipeline_layers=";
  const ResumePlan plan = {
      {{"even", 2, 1, PP2}, {{"3+1", 2, 1, PP2 + L + "3,1"}}},
      {{"1+3", 2, 1, PP2 + L + "1,3"}, {{"even", 2, 1, PP2}, {"pp1", 1, 1, ""}}},
  };
  expect_resumes(d, plan, args, ref, 1e-5);
  fs::remove_all(d);
}

TEST(CheckpointE2E, KillDuringBackgroundWriteResumesFromPreviousCommit) {
  const std::string d = fresh_dir("ckpt-kill");
  // Rank 1 dies after writing its first dataset of step 10's save.
  setenv("SCALETRAIN_FAULT", "kill:1:10:dataset", 1);
  auto r = run_scaletrain(2, tiny(20, 2) + " --set runtime.timeout_s=20 --out " + d);
  unsetenv("SCALETRAIN_FAULT");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d + "/checkpoints/step_00000005"));
  EXPECT_FALSE(fs::exists(d + "/checkpoints/step_00000010"));
  auto out = run_ok(2, tiny(20, 2) + " --out " + d);
  EXPECT_NE(out.find("step_00000005 (step 5)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(d + "/checkpoints/step_00000010.tmp")) << "stale tmp not cleaned";
  fs::remove_all(d);
}

// A resume checks the rank files' metadata first and each data block as it
// loads it: a flipped byte in the middle of rank 1's largest dataset of
// step 10 passes the first check, fails its block at load, and every rank
// goes back to step 5.
TEST(CheckpointE2E, CorruptNewestCheckpointIsNamedAndSkipped) {
  const std::string d = fresh_dir("ckpt-corrupt");
  run_ok(2, tiny(20, 2) + " --set train.stop_after=10 --set checkpoint.keep_last_n=3 --out " + d);
  const std::string step = d + "/checkpoints/step_00000010", f = step + "/rank_00001.h5";
  const auto idx = nlohmann::json::parse(std::ifstream(step + "/index.json"));
  uint64_t at = 0, len = 0;
  for (const auto& e : idx["files"][1]["data_extents"])
    if (e[1].get<uint64_t>() > len) {
      at = e[0].get<uint64_t>();
      len = e[1].get<uint64_t>();
    }
  ASSERT_GT(len, 0u) << idx["files"][1].dump();
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    const auto pos = std::streamoff(at + len / 2);
    char c;
    io.seekg(pos);
    io.get(c);
    io.seekp(pos);
    io.put(char(c ^ 0x5a));
  }
  auto out = run_ok(2, tiny(20, 2) + " --out " + d);
  EXPECT_NE(out.find("rank_00001.h5', dataset '"), std::string::npos) << out;
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + d + "/checkpoints/step_00000005"), std::string::npos) << out;
  fs::remove_all(d);
}

TEST(CheckpointE2E, SigusrGivesEmergencyCheckpointThatResumesExactly) {
  const std::string d = fresh_dir("ckpt-signal");
  const std::string args = tiny(300, 2) + " --set checkpoint.interval=1000";
  run_ok(2, args + " --out " + d + "/straight");
  // Start the run in the background, signal it once it is training.
  const std::string run = d + "/signalled";
  std::string cmd = mpiexec() + " --oversubscribe --bind-to none -n 2 " + bin() + args + " --out " +
                    run + " > " + d + "/log.txt 2>&1 & echo $!";
  auto pid_out = run_cmd(cmd);
  pid_t pid = std::stoi(pid_out.output);
  for (int i = 0; i < 600 && read_series(run, 0, "loss").size() < 20; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(read_series(run, 0, "loss").size(), 20u) << "run did not start";
  ::kill(pid, SIGUSR1);  // mpirun forwards SIGUSR1 to every rank
  // mpirun is not our child (the shell started it): poll until it is gone.
  for (int i = 0; i < 1200 && ::kill(pid, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(::kill(pid, 0), 0) << "the signalled run did not stop";
  std::string log = st::test::run_cmd("cat " + d + "/log.txt").output;
  EXPECT_NE(log.find("emergency checkpoint committed"), std::string::npos) << log;
  const size_t stopped_at = read_series(run, 0, "loss").size();
  EXPECT_LT(stopped_at, 300u);
  run_ok(2, args + " --out " + run);
  auto a = read_series(d + "/straight", 0, "loss");
  auto b = read_series(run, 0, "loss");
  EXPECT_EQ(a, b) << "stopped at " << stopped_at;
  fs::remove_all(d);
}

TEST(CheckpointE2E, H5pyReadsEveryTensorOfATrainerCheckpoint) {
  const std::string d = fresh_dir("ckpt-h5py");
  run_ok(2, tiny(5, 2) + " --out " + d);
  auto r = run_cmd(env_or("SCALETRAIN_PYTHON", "python3") + " " + src_dir() +
                   "/ctest/checkpoint/check_h5py.py " + d + "/checkpoints/step_00000005");
  if (r.exit_code == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // 2-layer tiny model: embedding, 9 per layer, final norm, head = 21
  // parameter tensors, each saved as weights and two AdamW moments.
  EXPECT_NE(r.output.find("of 63 tensors ok"), std::string::npos) << r.output;
  fs::remove_all(d);
}

// A save that fails mid-run (here a full disk, enospc_shim.c) is a
// telemetry event and a warning; training goes on, or stops with
// on_error=abort. (A folder that cannot be written at all is refused at
// start-up: a row of the bad-input table.)
TEST(CheckpointE2E, FailedSavesContinueOrStop) {
  const std::string d = fresh_dir("ckpt-full");
  const std::string full =
      "SCALETRAIN_ENOSPC_PATH=/checkpoints/step_ LD_PRELOAD=" + std::string(ST_ENOSPC_SHIM) + " ";
  const std::string args = tiny(12, 1);
  auto cont = run_cmd(full + bin() + args + " --out " + d + "/continue");
  EXPECT_EQ(cont.exit_code, 0) << cont.output;
  EXPECT_NE(cont.output.find("No space left on device"), std::string::npos) << cont.output;
  EXPECT_EQ(read_series(d + "/continue", 0, "loss").size(), 12u) << "training should go on";
  auto tel = run_cmd("grep -c ckpt_fail " + d + "/continue/telemetry/rank_00000.jsonl").output;
  EXPECT_GE(std::atoi(tel.c_str()), 2) << "each failed save is a telemetry event";
  auto stop =
      run_cmd(full + bin() + args + " --set checkpoint.on_error=abort --out " + d + "/abort");
  EXPECT_NE(stop.exit_code, 0) << stop.output;
  EXPECT_EQ(stop.term_signal, 0) << stop.output;
  EXPECT_LT(read_series(d + "/abort", 0, "loss").size(), 12u) << "on_error=abort must stop";
  fs::remove_all(d);
}

// configs/clusters/cpu-local.yaml with every kernel `factor` times slower
// (its measured op times times `factor`, its peak divided by it), written
// into `dir`: the trainer's run.json prediction of a step scales with it.
std::string scaled_cluster(const std::string& dir, double factor) {
  std::ifstream in(src_dir() + "/configs/clusters/cpu-local.yaml");
  const std::string out = dir + "/cluster-" + std::to_string(int(std::log10(factor))) + ".yaml";
  std::ofstream o(out);
  auto g9 = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", x);
    return std::string(b);
  };
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.rfind(": ");
    if (line.rfind("  \"", 0) == 0 && colon != std::string::npos)
      line = line.substr(0, colon + 2) + g9(std::stod(line.substr(colon + 2)) * factor);
    else if (line.rfind("peak_tflops: ", 0) == 0)
      line = "peak_tflops: " + g9(std::stod(line.substr(13)) / factor);
    o << line << "\n";
  }
  return out;
}

// The start-up line and warning of app/ckpt_storage.cpp (issue 53 item 4)
// from the storage probe (4 MiB) and run.json's predicted step time, set
// through the cluster file: with kernels 1e4 times faster than measured a
// step is predicted far shorter than the write of its state, so interval 1
// cannot hide it and the warning must name the predicted step and the
// smallest interval that would; 1e4 times slower, a step is predicted to
// take longer than any write here, so there is no warning. The only runs of
// this file with the probe on (2 steps on 1 rank each).
TEST(CheckpointE2E, StartUpSaysWhenTheIntervalCannotHideAWrite) {
  const std::string d = fresh_dir("ckpt-overlap");
  const std::string args = " --config " + src_dir() +
                           "/configs/models/tiny.yaml --set train.steps=2 --set train.micro_batch=4"
                           " --set checkpoint.interval=1 --set checkpoint.probe_mb=4";
  auto num = [](const std::string& s, const std::string& re) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(s, m, std::regex(re))) << re << "\n" << s;
    return m.size() > 1 ? std::stod(m[1].str()) : -1.0;
  };
  const std::string g = "([0-9.]+(?:e[-+]?[0-9]+)?)";
  const std::string fast =
      run_ok(1, args + " --set runtime.cluster=" + scaled_cluster(d, 1e-4) + " --out " + d + "/f");
  const double write_s = num(fast, "per node: " + g + " s at the probed");
  EXPECT_GT(write_s, 0) << fast;
  EXPECT_NEAR(num(fast, "checkpoint.interval=1 hides it when a step takes >= " + g), write_s,
              1e-5 * write_s);
  const auto run = nlohmann::json::parse(std::ifstream(d + "/f/run.json"));
  ASSERT_TRUE(run.contains("storage")) << "the probe's figures in run.json";
  const double step = run["prediction"]["step_s"].get<double>();
  ASSERT_LT(step, write_s / 10) << "the scaled cluster file should predict a step far shorter";
  EXPECT_NE(fast.find("cannot hide a save's write"), std::string::npos) << fast;
  EXPECT_NEAR(num(fast, "at the predicted " + g + " s per step"), step, 1e-5 * step);
  const double hide = num(fast, "an interval of ([0-9]+) steps or more would hide it");
  EXPECT_NEAR(hide, std::ceil(write_s / step), 1e-4 * hide + 1) << fast;

  const std::string slow =
      run_ok(1, args + " --set runtime.cluster=" + scaled_cluster(d, 1e4) + " --out " + d + "/s");
  const auto srun = nlohmann::json::parse(std::ifstream(d + "/s/run.json"));
  EXPECT_GT(srun["prediction"]["step_s"].get<double>(), 10.0);
  EXPECT_NE(slow.find("hides it when a step takes >="), std::string::npos) << slow;
  EXPECT_EQ(slow.find("cannot hide"), std::string::npos) << slow;
  fs::remove_all(d);
}
