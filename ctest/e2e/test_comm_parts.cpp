// Exposed communication by part of the step, from real multi-rank runs: every
// step record's `comm_wait_s` holds the host waits of tp, cp, pp, dp, zero
// and other (docs/telemetry.md); scaletrain-analyze run splits the exposed
// share by them, the parts summing to it. A dp2 x pp2 run waits on the pp
// links and the dp reductions, never on tp or ZeRO; a tp2 x dp2 ZeRO-1 run
// waits on tp, dp and ZeRO's parameter gathers, never on pp. Every step
// record's step_parts_s, and the analyzer's shares of the parts, add up to
// the step with no part below 0 (a dp4 ZeRO-3 run too). run.json records
// the memory capacity a CPU rank is measured against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/step_parts.hpp"
#include "run_util.hpp"

namespace {
using namespace st::test;
using Parts = std::map<std::string, double>;
const char* const kParts[] = {"tp", "cp", "pp", "dp", "zero", "other"};

std::string analyze() { return env_or("SCALETRAIN_ANALYZE", "scaletrain-analyze"); }

// A step record's step_parts_s: every part of core/step_parts.hpp, none
// below 0 (a second counted in two parts would push `other` below it), and
// together the step.
void check_step_parts(const nlohmann::json& rec) {
  const auto& p = rec.at("step_parts_s");
  const double step = rec.at("step_s").get<double>();
  double sum = 0;
  for (const char* k : st::kStepPartNames) {
    ASSERT_TRUE(p.contains(k)) << k << " missing in " << p.dump();
    const double v = p.at(k).get<double>();
    EXPECT_GE(v, 0) << k << " at step " << rec.at("step") << ": " << p.dump();
    sum += v;
  }
  EXPECT_NEAR(sum, step, 1e-9 * std::max(1.0, step)) << p.dump();
}

// Every rank's comm_wait_s summed over the steps after the first (and each
// step record's parts checked).
Parts summed_waits(const std::string& run, int ranks) {
  Parts sum;
  for (int r = 0; r < ranks; ++r) {
    char name[64];
    std::snprintf(name, sizeof name, "/telemetry/rank_%05d.jsonl", r);
    std::ifstream in(run + name);
    std::string line;
    int steps = 0;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || j.value("type", "") != "step") continue;
      ++steps;
      check_step_parts(j);
      const auto& w = j.at("comm_wait_s");
      for (const char* p : kParts) {
        EXPECT_TRUE(w.contains(p)) << p << " missing in " << w.dump();
        if (j.at("step").get<int>() > 1) sum[p] += w.value(p, 0.0);
      }
    }
    EXPECT_EQ(steps, 6) << run << " rank " << r;
  }
  return sum;
}

// The analyzer's exposed share and its parts (summary.json).
void check_summary(const std::string& run, const std::set<std::string>& nonzero) {
  auto r = run_cmd(analyze() + " run " + run + " --no-plots");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(run + "/analysis/summary.json");
  const auto j = nlohmann::json::parse(f);
  const auto& sh = j.at("shares");
  // The step's parts as shares: each at least 0, together 1.
  double total = 0;
  for (const char* k : st::kStepPartNames) {
    const double v = sh.at("parts").at(k).get<double>();
    EXPECT_GE(v, 0) << k << " in " << sh.dump();
    total += v;
  }
  EXPECT_NEAR(total, 1.0, 1e-9) << sh.dump();
  const double exposed = sh.at("parts").at("comm").get<double>();
  EXPECT_GT(exposed, 0);
  double sum = 0;
  for (const auto& [k, v] : sh.at("comm_exposed_parts").items()) {
    sum += v.get<double>();
    if (nonzero.count(k)) {
      EXPECT_GT(v.get<double>(), 0) << k << " in " << sh.dump();
    } else if (k != "other") {  // host reductions: every layout has some
      EXPECT_EQ(v.get<double>(), 0) << k << " in " << sh.dump();
    }
  }
  EXPECT_NEAR(sum, exposed, 1e-9 * std::max(1.0, exposed)) << sh.dump();
  EXPECT_EQ(sh.at("comm_exposed_parts").at("unattributed").get<double>(), 0) << sh.dump();
}

std::string tiny(const std::string& layout, const std::string& out) {
  return "--config " + src_dir() + "/configs/models/tiny.yaml --set train.steps=6 " + layout +
         " --out " + out;
}
}  // namespace

TEST(CommParts, DpTimesPpWaitsOnPipelineAndDataParallel) {
  const std::string dir = fresh_dir("comm_parts_pp") + "/run";
  auto r = run_scaletrain(
      4, tiny("--set parallel.pp=2 --set parallel.dp=2 --set train.grad_accum=2", dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Parts w = summed_waits(dir, 4);
  EXPECT_GT(w.at("pp"), 0);
  EXPECT_GT(w.at("dp"), 0);
  EXPECT_GT(w.at("other"), 0);
  EXPECT_EQ(w.at("tp"), 0);
  EXPECT_EQ(w.at("cp"), 0);
  EXPECT_EQ(w.at("zero"), 0);
  check_summary(dir, {"pp", "dp", "other"});
  // run.json: the host's available memory over its 4 ranks.
  std::ifstream f(dir + "/run.json");
  const auto j = nlohmann::json::parse(f);
  const auto& dev = j.at("device");
  EXPECT_GT(dev.at("memory_capacity_bytes").get<int64_t>(), 0) << dev.dump();
  EXPECT_NE(dev.at("memory_capacity_source").get<std::string>().find("over its 4 rank(s)"),
            std::string::npos)
      << dev.dump();
}

TEST(CommParts, TpTimesDpZeroWaitsOnTensorDataParallelAndZero) {
  const std::string dir = fresh_dir("comm_parts_tp") + "/run";
  auto r = run_scaletrain(
      4, tiny("--set parallel.tp=2 --set parallel.dp=2 --set parallel.zero_stage=1", dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Parts w = summed_waits(dir, 4);
  EXPECT_GT(w.at("tp"), 0);
  EXPECT_GT(w.at("dp"), 0);
  EXPECT_GT(w.at("zero"), 0);
  EXPECT_EQ(w.at("pp"), 0);
  EXPECT_EQ(w.at("cp"), 0);
  check_summary(dir, {"tp", "dp", "zero", "other"});
}

// ZeRO 3 waits for its parameter gathers inside the forward and backward:
// those seconds are comm, not compute as well (step_parts_s would add up past
// the step, and `other` fall below 0, were they counted twice).
TEST(CommParts, ZeroThreeGatherWaitsAreCommNotCompute) {
  const std::string dir = fresh_dir("comm_parts_zero3") + "/run";
  auto r = run_scaletrain(4, tiny("--set parallel.dp=4 --set parallel.zero_stage=3", dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Parts w = summed_waits(dir, 4);
  EXPECT_GT(w.at("zero"), 0);
  EXPECT_GT(w.at("dp"), 0);
  EXPECT_EQ(w.at("tp"), 0);
  EXPECT_EQ(w.at("pp"), 0);
  check_summary(dir, {"dp", "zero", "other"});
}

// A pipeline send moves while its stage computes the next op. Over TCP (as
// between nodes) MPI moves a message past its eager size only inside the
// sender's MPI calls; the engine tests its sends at every layer
// (Engine::progress_pp_sends), so the next stage receives the first
// micro-batch's activations during the sender's second forward, not after
// it (docs/design.md). Two ranks on one host, forced onto the TCP transport;
// the activations (128 tokens x 512 x 4 bytes) are past its eager size.
TEST(CommParts, PipelineActivationsArriveDuringTheSendersNextForward) {
  const std::string dir = fresh_dir("comm_parts_p2p") + "/run";
  ::setenv("OMPI_MCA_btl", "self,tcp", 1);
  auto r = run_scaletrain(2, "--config " + src_dir() +
                                 "/configs/models/default.yaml --set model.seq_len=128 "
                                 "--set train.steps=6 --set parallel.pp=2 --set "
                                 "train.micro_batch=1 --set train.grad_accum=4 "
                                 "--set checkpoint.interval=0 --set runtime.threads=1 --out " +
                                 dir);
  ::unsetenv("OMPI_MCA_btl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Per step: rank 0's forwards (compute spans named fwd) and rank 1's
  // first receive of activations.
  auto spans = [&](int rank) {
    std::map<int, std::vector<nlohmann::json>> by_step;
    std::ifstream in(dir + "/telemetry/rank_0000" + std::to_string(rank) + ".jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || j.value("type", "") != "trace") continue;
      for (const auto& s : j.at("spans")) by_step[j.at("step").get<int>()].push_back(s);
    }
    return by_step;
  };
  const auto s0 = spans(0), s1 = spans(1);
  int steps = 0, during = 0;
  std::string seen;
  for (const auto& [step, sp] : s0) {
    if (step < 2 || !s1.count(step)) continue;
    std::vector<std::pair<double, double>> fwd;
    for (const auto& s : sp)
      if (s.at("k") == "compute" && s.value("n", "") == "fwd")
        fwd.push_back({s.at("t0").get<double>(), s.at("t1").get<double>()});
    std::sort(fwd.begin(), fwd.end());
    double got = -1;
    for (const auto& s : s1.at(step))
      if (s.at("k").get<std::string>().rfind("comm:pp_fwd", 0) == 0 &&
          (got < 0 || s.at("t0").get<double>() < got))
        got = s.at("t1").get<double>();
    ASSERT_GE(fwd.size(), 2u) << "step " << step;
    ASSERT_GE(got, 0) << "step " << step << ": rank 1 has no activation receive";
    ++steps;
    if (got < fwd[1].second) ++during;
    seen += " step " + std::to_string(step) + ": received " +
            std::to_string((got - fwd[0].second) * 1e3) + " ms after the send, second forward " +
            std::to_string((fwd[1].second - fwd[0].second) * 1e3) + " ms;";
  }
  ASSERT_GE(steps, 4);
  EXPECT_GE(during, steps - 1) << seen;
}
