// The profiler ranges' host logic (core/ranges.hpp), which the CUDA backend
// only forwards to NVTX and cudaProfilerStart/Stop (kernels/cuda/
// nvtx_ranges.cpp): a recording sink stands where NVTX goes and sees the
// names and nesting of a real training step (the trainer's Engine and Model
// on the recording backend: forward and backward per micro-batch) and of the
// trainer's phases (spans::Phase: the same name as the trace span); the
// collective's range name; runtime.profile_steps parsed with clear errors;
// and the capture window started and stopped at exactly the chosen steps
// (resumed runs and runs that end inside the window included).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/ranges.hpp"
#include "core/span_log.hpp"
#include "record/step.hpp"

namespace {
using namespace st;

// Where NVTX would be: every call, and the nesting checked as it happens.
struct Recorder final : ranges::Sink {
  std::vector<std::string> log;  // "+name", "-name", "capture on|off"
  std::vector<std::string> open;
  int max_depth = 0;
  void push(const char* n) override {
    log.push_back(std::string("+") + n);
    open.push_back(n);
    max_depth = std::max(max_depth, int(open.size()));
  }
  void pop() override {
    ASSERT_FALSE(open.empty()) << "pop without an open range";
    log.push_back("-" + open.back());
    open.pop_back();
  }
  void capture(bool on) override { log.push_back(on ? "capture on" : "capture off"); }
};

struct SinkGuard {
  explicit SinkGuard(ranges::Sink* s) { ranges::set_sink(s); }
  ~SinkGuard() { ranges::set_sink(nullptr); }
};

TEST(Ranges, TrainingStepForwardBackwardPerMicroBatch) {
  Config c = load_config("", {"model.preset=tiny", "train.micro_batch=2", "train.grad_accum=3"});
  resolve_layout(c, 1);
  Recorder r;
  {
    SinkGuard g(&r);
    const ranges::Scope step(ranges::step_name(5));
    record::record_step(c, 0);
  }
  EXPECT_TRUE(r.open.empty()) << "every range closed";
  // The step holds, one after the other, forward then backward of each micro-batch.
  std::vector<std::string> want = {"+step 5"};
  for (int mb = 0; mb < 3; ++mb)
    for (const char* p : {"fwd", "bwd"}) {
      want.push_back(std::string("+") + p);
      want.push_back(std::string("-") + p);
    }
  want.push_back("-step 5");
  EXPECT_EQ(r.log, want);
  EXPECT_EQ(r.max_depth, 2);
}

TEST(Ranges, PhaseOpensSpanAndRangeOfOneName) {
  Recorder r;
  SinkGuard g(&r);
  spans::set_level(spans::TraceLevel::kPhases);
  spans::take();
  {
    const ranges::Scope step(ranges::step_name(1));
    { const spans::Phase p("optim"); }
    { const spans::Phase p("ckpt_snapshot"); }
  }
  const auto s = spans::take();
  spans::set_level(spans::TraceLevel::kOff);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "optim");
  EXPECT_EQ(s[0].track, "host");
  EXPECT_EQ(s[1].name, "ckpt_snapshot");
  EXPECT_EQ(r.log, (std::vector<std::string>{"+step 1", "+optim", "-optim", "+ckpt_snapshot",
                                             "-ckpt_snapshot", "-step 1"}));
  // Trace off: the range still opens (nsys without runtime.trace).
  r.log.clear();
  { const spans::Phase p("signal_vote"); }
  EXPECT_EQ(r.log, (std::vector<std::string>{"+signal_vote", "-signal_vote"}));
  EXPECT_TRUE(spans::take().empty());
}

TEST(Ranges, NoSinkNoCalls) {
  ASSERT_EQ(ranges::sink(), nullptr);
  const ranges::Scope s("fwd");  // nothing to call; must not crash
  ranges::CaptureWindow w({2, 3});
  w.begin_step(2);
  EXPECT_TRUE(w.capturing());
  w.end_step(3);
  EXPECT_FALSE(w.capturing());
}

TEST(Ranges, CollectiveName) {
  EXPECT_EQ(ranges::collective_name("all_reduce", "dp_cp", 4096), "all_reduce comm:dp_cp 4096B");
  EXPECT_EQ(ranges::collective_name("reduce_scatter", "tp", 0), "reduce_scatter comm:tp 0B");
}

TEST(Ranges, ParseStepWindow) {
  const auto w = ranges::parse_step_window("runtime.profile_steps", "10-12");
  EXPECT_EQ(w.first, 10);
  EXPECT_EQ(w.last, 12);
  const auto one = ranges::parse_step_window("runtime.profile_steps", "7");
  EXPECT_EQ(one.first, 7);
  EXPECT_EQ(one.last, 7);
  EXPECT_TRUE(ranges::parse_step_window("runtime.profile_steps", "").empty());
  for (const char* bad : {"0-2", "3-2", "a-b", "-3", "2-", "1-2-3", " 2-3", "2..3", "1e3"}) {
    try {
      ranges::parse_step_window("runtime.profile_steps", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("runtime.profile_steps: '" + std::string(bad) + "'"), std::string::npos)
          << m;
      EXPECT_NE(m.find("valid: A-B"), std::string::npos) << m;
    }
  }
}

TEST(Ranges, ProfileStepsInTheConfig) {
  EXPECT_EQ(
      load_config("", {"model.preset=tiny", "runtime.profile_steps=2-3"}).runtime.profile_steps,
      "2-3");
  try {
    load_config("", {"model.preset=tiny", "train.steps=4", "runtime.profile_steps=5-6"});
    ADD_FAILURE() << "a window after the last step was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("starts after the last step (train.steps=4)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_config("", {"model.preset=tiny", "runtime.profile_steps=x"}), UsageError);
}

// Steps run..last with the window; the capture calls between the steps.
std::vector<std::string> run_steps(ranges::StepWindow win, long first, long last) {
  Recorder r;
  SinkGuard g(&r);
  ranges::CaptureWindow w(win);
  for (long s = first; s <= last; ++s) {
    w.begin_step(s);
    r.log.push_back(std::to_string(s));
    w.end_step(s);
  }
  w.finish();
  return r.log;
}

TEST(Ranges, CaptureWindowExactlyTheChosenSteps) {
  using V = std::vector<std::string>;
  EXPECT_EQ(run_steps({2, 3}, 1, 5), (V{"1", "capture on", "2", "3", "capture off", "4", "5"}));
  EXPECT_EQ(run_steps({4, 4}, 1, 5), (V{"1", "2", "3", "capture on", "4", "capture off", "5"}));
  // Resumed at step 3, inside the window: captured from the first step run.
  EXPECT_EQ(run_steps({2, 4}, 3, 5), (V{"capture on", "3", "4", "capture off", "5"}));
  // The run ends inside the window (a signal, train.stop_after): stopped at the end.
  EXPECT_EQ(run_steps({2, 9}, 1, 3), (V{"1", "capture on", "2", "3", "capture off"}));
  // Past the window, or none: never started.
  EXPECT_EQ(run_steps({1, 2}, 3, 4), (V{"3", "4"}));
  EXPECT_EQ(run_steps({}, 1, 2), (V{"1", "2"}));
}

}  // namespace
