// The training loop (see trainer.hpp): the job set up (job.cpp), then one
// step after another around the step engine (lib/engine: micro-batches,
// bucketed gradient reduction, ZeRO, clip, AdamW), which is the same on every
// device; each step's record comes from step_record.cpp. Rank 0 prints
// progress.
#include "trainer.hpp"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <vector>

#include "ckpt_storage.hpp"
#include "core/log.hpp"
#include "core/ranges.hpp"
#include "core/span_log.hpp"
#include "core/util.hpp"
#include "job.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "phase_clock.hpp"
#include "runtime/flight_recorder.hpp"
#include "step_record.hpp"

namespace st {

metrics::ModelShape model_shape(const Config& cfg) {
  metrics::ModelShape s;
  s.n_params = count_params(cfg.model);
  s.n_layers = cfg.model.n_layers;
  s.d_model = cfg.model.d_model;
  s.n_heads = cfg.model.n_heads;
  s.seq_len = cfg.model.seq_len;
  return s;
}

int64_t global_batch(const Config& cfg) {
  return int64_t(cfg.train.micro_batch) * cfg.train.grad_accum * cfg.parallel.dp;
}

namespace {

std::string fmt_eta(double s) {
  char b[32];
  if (s >= 3600)
    std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else
    std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  return b;
}

// The steady-state pace and rank 0's progress lines. Every step's slowest
// rank time is kept; the summary line takes the window and statistic of
// metrics::steady_state, the one that scaletrain-analyze's reports use, so
// the trainer and report.md print the same tok/s and MFU.
struct Progress {
  const Job& j;
  double model_flops_step, hw_flops_step;
  std::vector<double> slow_steps;  // the slowest rank's step time, every step of this job

  explicit Progress(const Job& job) : j(job) {
    const auto mshape = model_shape(j.cfg);
    const double gb = double(global_batch(j.cfg));
    model_flops_step = metrics::mpt_model_flops_per_seq(mshape) * gb;
    hw_flops_step = metrics::mpt_hw_flops_per_seq(mshape, j.cfg.train.act_ckpt) * gb;
  }
  double tokens_per_step() const { return double(global_batch(j.cfg) * j.cfg.model.seq_len); }
  double util(double flops_step, double step_s) const {
    return flops_step / step_s / (j.peak * j.rt->world_size());
  }
  void add(long step, double slow, double loss, double lr, int64_t mem, long last) {
    const Config& cfg = j.cfg;
    slow_steps.push_back(slow);
    if (j.rt->rank() != 0 ||
        !(step % cfg.train.log_every == 0 || step == last || step == j.start_step))
      return;
    const double pace = metrics::steady_state(slow_steps, cfg.train.warmup_steps_excluded).step_s;
    const double tok_s = tokens_per_step() / slow;
    char line[288];
    std::snprintf(line, sizeof line,
                  "step %5ld/%ld | loss %.4f | %8.0f tok/s (%.0f /dev) | MFU %5.1f%% | %7.1f ms | "
                  "mem %s | lr %.2e | ETA %s",
                  step, long(cfg.train.steps), loss, tok_s, tok_s / j.rt->world_size(),
                  100.0 * util(model_flops_step, slow), slow * 1e3,
                  human_bytes(double(mem)).c_str(), lr,
                  fmt_eta(pace * double(cfg.train.steps - step)).c_str());
    log0(line);
  }
  // Printed to the precision of report.md (tok/s 0.1, MFU/HFU 0.01 points).
  void summary(long steps, double wall) const {
    if (slow_steps.empty()) return;
    const auto ss = metrics::steady_state(slow_steps, j.cfg.train.warmup_steps_excluded);
    const double tok_s = tokens_per_step() / ss.step_s;
    char line[1024];
    std::snprintf(line, sizeof line,
                  "done: %ld steps in %.3g s; steady state (median step %.4f s, %s) %.1f tok/s, "
                  "%.1f tok/s per device, MFU %.2f%% of %.4g GFLOP/s per rank (%s), HFU %.2f%%",
                  steps, wall, ss.step_s, metrics::steady_state_rule(ss.warmup).c_str(), tok_s,
                  tok_s / j.rt->world_size(), 100.0 * util(model_flops_step, ss.step_s),
                  j.peak / 1e9, j.peak_source.c_str(), 100.0 * util(hw_flops_step, ss.step_s));
    log0(line);
  }
};

// A host phase of the step: its trace span and its profiler range (NVTX on CUDA).
using spans::Phase;

// The checkpoint of this step (due by the interval, or a signal: an
// emergency save). Returns the seconds the loop waited (the stall); the
// write happens in the background.
double checkpoint_step(Job& j, long step, double sig) {
  const auto state = [&] {
    return checkpoint_state(j.engine->state(), j.cfg, step, j.loader->samples_consumed(step));
  };
  if (sig > 0) {
    j.tel.event("signal", step, {{"signal", signal_name(int(sig))}});
    log0("received ", signal_name(int(sig)), " at step ", step, "; emergency checkpoint");
    SaveStats ss = j.ckpt->emergency_save(step, state());
    log0(ss.committed ? "emergency checkpoint committed" : "emergency checkpoint FAILED", " (",
         ss.stall_s, " s)");
    return ss.stall_s;
  }
  return j.ckpt->save(step, state()).stall_s;
}

// One step: forward/backward, update, the signal vote, the checkpoint, the
// telemetry record. Returns the signal the ranks agreed on (0: none).
double train_step(Job& j, long step, Progress& progress, long last) {
  Engine& engine = *j.engine;
  MpiCommunicator& world = *j.world;
  const ranges::Scope step_range(ranges::step_name(step));  // the profiler's outer range
  engine.begin_step();
  j.be->ops().take_paths();  // what ran since the last record (an evaluation) is not this step's
  const std::vector<Communicator*> comms = engine.comms();
  world.reset_stats();
  for (Communicator* g : comms) g->reset_stats();
  if (step == j.fault_step) ::raise(j.fault_signal);  // the hang tests
  StepResult t;
  t.step = step;
  t.t_start = epoch_seconds();
  const double t0 = wall_time(), c0 = process_cpu_seconds();

  j.loader->check_step(step);  // the same verdict on every rank: a bad id stops all (exit 2)
  flight::note_phase("forward/backward", step);
  t.fb = engine.forward_backward(step, *j.loader);
  t.lr = j.lr.at(step);
  const bool skipped = !t.fb.finite;
  if (skipped) {
    j.tel.event("nan_skip", step, {{"loss", t.fb.loss}, {"grad_norm", t.fb.grad_norm}});
    logw("step ", step, ": loss ", t.fb.loss, " grad_norm ", t.fb.grad_norm,
         " not finite; update skipped");
  }
  {
    flight::note_phase("optimizer", step);
    const Phase p("optim");
    t.fb.t.optim = engine.apply(step, t.lr, t.fb.grad_norm, skipped, &t.fb.t.comm_exposed);
  }

  // Signals (Slurm preemption): every rank must agree to stop together.
  double sig = pending_signal();
  {
    flight::note_phase("signal vote", step);
    const Phase p("signal_vote");
    const double ts = wall_time();
    world.all_reduce_max(&sig, 1);
    t.fb.t.comm_exposed += wall_time() - ts;
  }
  if (sig > 0)
    flight::dump(std::string("signal ") + signal_name(int(sig)) + " at step " +
                 std::to_string(step));
  const auto& ck = j.cfg.checkpoint;
  const bool due = ck.interval > 0 && (step % ck.interval == 0 || (ck.save_last && step == last));
  if (sig > 0 || due) {
    flight::note_phase("checkpoint", step);
    const Phase p("ckpt_snapshot");
    t.fb.t.ckpt_stall = checkpoint_step(j, step, sig);
  }
  t.fb.t.step = wall_time() - t0;
  t.cpu_s = process_cpu_seconds() - c0;

  flight::note_phase("telemetry", step);
  // The slowest rank's step time sets the pace: the one tok/s of the
  // progress line, the step record (TensorBoard's rates) and report.md.
  t.slowest_step_s = t.fb.t.step;
  world.all_reduce_max(&t.slowest_step_s, 1);
  const EngineMemory mem = engine.memory();
  j.tel.step(step_record(t, j.cfg, world, comms, mem, *j.be));
  if (spans::on()) j.tel.trace(trace_record(step, spans::take()));

  progress.add(step, t.slowest_step_s, t.fb.loss, t.lr, mem.peak_total, last);
  // The validation loss is logged after the step's progress line.
  if (j.evaluator && sig == 0 && j.evaluator->due(step, last)) {
    flight::note_phase("evaluation", step);
    j.evaluator->run(step, engine, j.tel);
  }
  return sig;
}

// After the first step: the start-up phases of every rank (the slowest
// rank's wall time, the CPU time per rank) into the log and run.json.
void startup_phases(Job& j) {
  startup_clock().mark("first_step");
  const nlohmann::json s = summarize_phases(*j.world, startup_clock());
  log0("start-up to the end of step ", j.start_step, ": ", format_phases(s));
  if (j.rt->rank() == 0) add_to_run_json(j.out + "/run.json", "startup", s);
}

}  // namespace

int run_training(Runtime& rt, Config cfg) {
  std::unique_ptr<Job> job = setup_job(rt, std::move(cfg));
  Job& j = *job;
  log0("scaletrain ", run_banner(j.info));
  log0("data: ", j.loader->source().describe(), "; global batch ", global_batch(j.cfg), " x ",
       j.cfg.model.seq_len, " tokens; ", j.engine->num_buckets(), " gradient bucket(s); mesh ",
       j.mesh->describe());
  if (j.evaluator) log0("validation: ", j.evaluator->describe());
  log0("compute: ", j.info.compute);
  log0("run folder: ", j.out);

  Progress progress(j);
  int exit_code = 0;
  const double t_loop0 = wall_time();
  const long total = j.cfg.train.steps;
  const long last =
      j.cfg.train.stop_after > 0 ? std::min<long>(total, j.cfg.train.stop_after) : total;
  if (j.start_step > last) log0("nothing to do: checkpoint is at step ", j.start_step - 1);
  long step = j.start_step;
  spans::take();  // start-up's collectives are not a step's
  // runtime.profile_steps: the device profiler captures exactly those steps.
  ranges::set_sink(j.be->ranges());
  ranges::CaptureWindow capture(
      ranges::parse_step_window("runtime.profile_steps", j.cfg.runtime.profile_steps));
  if (!j.cfg.runtime.profile_steps.empty() && !ranges::sink())
    log0("runtime.profile_steps: no device profiler on ", j.be->name(),
         " ranks; the trace records (runtime.trace) hold the same phases");
  for (; step <= last; ++step) {
    capture.begin_step(step);
    const double sig = train_step(j, step, progress, last);
    capture.end_step(step);
    if (step == j.start_step) startup_phases(j);
    if (step == j.start_step + j.cfg.checkpoint.interval - 1)  // the first interval's save
      warn_if_write_not_hidden(j, step - j.start_step + 1, wall_time() - t_loop0);
    if (sig > 0) {
      exit_code = kExitPreempted;
      ++step;
      break;
    }
  }
  capture.finish();
  const long steps_done = step - 1;
  PhaseClock exit_clock;  // the last step's end to the end of run_training
  // Drain the background save before reporting.
  double t_drain = wall_time();
  j.ckpt->finalize();
  t_drain = wall_time() - t_drain;
  exit_clock.mark("checkpoint_drain");
  if (t_drain > 0.01) log0("waited ", t_drain, " s for the last checkpoint to commit");
  const double wall = wall_time() - t_loop0;
  record_clock(j, steps_done, "end");
  exit_clock.mark("clock_sync");
  j.tel.event(
      "end", steps_done,
      {{"status", exit_code == 0 ? "ok" : "signal"}, {"wall_s", wall}, {"drain_s", t_drain}});
  j.tel.close();
  exit_clock.mark("telemetry_close");
  progress.summary(steps_done - j.start_step + 1, wall);
  const nlohmann::json ex = summarize_phases(*j.world, exit_clock);
  log0("exit (before MPI_Finalize): ", format_phases(ex));
  if (j.rt->rank() == 0) add_to_run_json(j.out + "/run.json", "exit", ex);
  log0("run folder: ", j.out);
  return exit_code;
}
}  // namespace st
