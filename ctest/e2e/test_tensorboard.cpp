// TensorBoard end to end (lib/tensorboard, docs/tensorboard.md): a 2-rank
// run with evaluation and checkpoints writes rank 0's event file live, and
// check_tensorboard.py reads it back (framing, CRCs, python3-protobuf) and
// finds every scalar equal to its telemetry value; the export of the
// finished run, alone and as a campaign, gives the same file; a folder that
// cannot be written is a clear error (exit 2), live and in the export. A
// resumed run keeps one event stream (each step once), whose tok/s is the
// progress line's, and a normal end leaves no empty folder (issue 56).
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "run_util.hpp"

using namespace st::test;
namespace fs = std::filesystem;

namespace {

std::string analyze() { return env_or("SCALETRAIN_ANALYZE", "scaletrain-analyze"); }

// The read-back: the python checker on a run and a TensorBoard folder
// (with_log: the progress lines' tok/s against TensorBoard's too).
RunResult check(const std::string& run, const std::string& tb, const std::string& same_as = "",
                bool with_log = false) {
  return run_cmd(env_or("SCALETRAIN_PYTHON", "python3") + " " + src_dir() +
                 "/ctest/e2e/check_tensorboard.py " + env_or("SCALETRAIN_PROTOC", "protoc") + " " +
                 src_dir() + "/lib/tensorboard " + run + " " + tb +
                 (same_as.empty() ? "" : " --same-as " + same_as) + (with_log ? " --log" : ""));
}

// Every folder under `dir` that holds nothing.
std::vector<std::string> empty_folders(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_directory() && fs::is_empty(e.path())) out.push_back(e.path().string());
  return out;
}

std::string args(const std::string& dir, const std::string& out) {
  return " --config " + src_dir() +
         "/configs/models/tiny.yaml --set train.steps=6 --set runtime.cpu_peak_gflops=1"
         " --set data.source=file --set data.path=" +
         dir + "/t.bin --set data.val_path=" + dir +
         "/t.bin --set train.eval_interval=3 --set checkpoint.interval=3 --out " + out;
}

void write_tokens(const std::string& path) {
  std::vector<uint16_t> v(20000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint16_t((i * 7) % 200);
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 2));
}

std::string one_event_file(const std::string& dir) {
  std::vector<std::string> f;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos)
      f.push_back(e.path().string());
  return f.size() == 1 ? f[0] : "";
}

TEST(TensorBoard, TwoRankRunLiveAndExportEqualTelemetry) {
  const std::string d = fresh_dir("tensorboard");
  write_tokens(d + "/t.bin");
  const std::string run = d + "/campaign/run_a";
  auto r = run_scaletrain(2, args(d, run));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tensorboard: " + run + "/tensorboard/events.out.tfevents."),
            std::string::npos)
      << r.output;
  ASSERT_FALSE(one_event_file(run + "/tensorboard").empty());

  // Live: every scalar equal to rank 0's telemetry.
  auto c = check(run, run + "/tensorboard");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("all equal"), std::string::npos) << c.output;
  std::printf("live read-back: %s", c.output.c_str());

  // Export of the finished run: the same records as the live file.
  auto e = run_cmd(analyze() + " export --tensorboard " + d + "/tb " + run);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  c = check(run, d + "/tb/run_a", run + "/tensorboard");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  std::printf("export read-back: %s", c.output.c_str());

  // A campaign: one sub-folder per run, each checked against its own telemetry.
  fs::copy(run, d + "/campaign/run_b", fs::copy_options::recursive);
  e = run_cmd(analyze() + " export --tensorboard=" + d + "/tb2 " + d + "/campaign");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  for (const char* n : {"run_a", "run_b"}) {
    c = check(d + "/campaign/" + n, d + "/tb2/" + n);
    EXPECT_EQ(c.exit_code, 0) << n << ": " << c.output;
  }

  // Exporting into a folder that already holds this run's events is refused.
  e = run_cmd(analyze() + " export --tensorboard " + d + "/tb " + run);
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("already holds event files"), std::string::npos) << e.output;
  // A folder that cannot be made (below a regular file) names it.
  e = run_cmd(analyze() + " export --tensorboard " + d + "/t.bin/tb " + run);
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("--tensorboard " + d + "/t.bin/tb: cannot create the folder"),
            std::string::npos)
      << e.output;
  // Not a run, not a campaign.
  e = run_cmd(analyze() + " export --tensorboard " + d + "/tb3 " + d + "/tb");
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("neither a run folder"), std::string::npos) << e.output;
  e = run_cmd(analyze() + " export " + run);
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("--tensorboard OUT is required"), std::string::npos) << e.output;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

TEST(TensorBoard, ResumedRunIsOneStreamAtTheProgressLinesPace) {
  const std::string d = fresh_dir("tensorboard-resume");
  write_tokens(d + "/t.bin");
  const std::string run = d + "/run";
  // Steps 1-4 with a checkpoint at 3 only, then a resume that does step 4 again.
  auto r = run_scaletrain(2, args(d, run) +
                                 " --set train.log_every=1 --set train.stop_after=4"
                                 " --set checkpoint.save_last=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(empty_folders(run), std::vector<std::string>{}) << "a normal end leaves none";
  r = run_scaletrain(2, args(d, run) + " --set train.log_every=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("(step 3)"), std::string::npos) << "resumed from step 3: " << r.output;
  EXPECT_FALSE(one_event_file(run + "/tensorboard").empty())
      << "one event file across the resume (TensorBoard would show step 4 twice)";
  // Every scalar equal to the telemetry, a step done again by its last
  // record, and each progress line's tok/s equal to TensorBoard's.
  auto c = check(run, run + "/tensorboard", "", true);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  std::printf("resumed read-back: %s", c.output.c_str());
  // The export of the resumed run: the same stream.
  auto e = run_cmd(analyze() + " export --tensorboard " + d + "/tb " + run);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  c = check(run, d + "/tb/run", run + "/tensorboard");
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(empty_folders(run), std::vector<std::string>{}) << "after the resume";
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

TEST(TensorBoard, UnwritableLiveFolderStopsEveryRankBeforeTraining) {
  const std::string d = fresh_dir("tensorboard-bad");
  write_tokens(d + "/t.bin");
  fs::create_directories(d + "/run");
  std::ofstream(d + "/run/tensorboard") << "a file where the folder goes\n";
  auto r = run_scaletrain(2, args(d, d + "/run"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("TensorBoard folder '" + d + "/run/tensorboard': cannot create it"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(d + "/run/run.json")) << "nothing written before the error";
  // A full disk under the folder (the preloaded ENOSPC shim): the first
  // record cannot be written; the same clear stop.
  r = run_cmd("env SCALETRAIN_ENOSPC_PATH=/run2/tensorboard/ LD_PRELOAD=" +
              std::string(ST_ENOSPC_SHIM) + " " + mpiexec() +
              " --oversubscribe --bind-to none -x SCALETRAIN_ENOSPC_PATH -x LD_PRELOAD -n 2 " +
              bin() + " " + args(d, d + "/run2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("TensorBoard folder '" + d + "/run2/tensorboard': cannot write"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  // runtime.tensorboard=false: the same folder trains.
  r = run_scaletrain(2, args(d, d + "/run") + " --set runtime.tensorboard=false");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
