// The training loop (see trainer.hpp): backend, run folder, mesh,
// checkpoints and telemetry around the step engine (lib/engine: micro-batches,
// bucketed gradient reduction, ZeRO, clip, AdamW), which is the same on every
// device. Rank 0 prints progress.
#include "trainer.hpp"

#include <cblas.h>
#include <omp.h>
#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "cpu_peak.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"
#include "engine/train_state.hpp"
#include "evaluate.hpp"
#include "host_memory.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "parallel/mesh.hpp"
#include "run_info.hpp"
#include "runtime/run_lock.hpp"
#include "telemetry/writer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

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

// Throws the same UsageError on every rank if any rank failed a setup check,
// so a bad file on one node cannot leave the others waiting.
void agree_on_setup(MpiCommunicator& world, const std::string& local_error) {
  double bad = local_error.empty() ? 0.0 : 1.0;
  world.all_reduce_max(&bad, 1);
  if (bad > 0) {
    if (!local_error.empty()) throw UsageError(local_error);
    throw UsageError("another rank failed its setup checks (see its message)");
  }
}

std::string fmt_eta(double s) {
  char b[32];
  if (s >= 3600)
    std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else
    std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  return b;
}
}  // namespace

int run_training(Runtime& rt, Config cfg) {
  const int rank = rt.rank();
  const int threads = pick_threads(cfg.runtime.threads, rt.local_size());
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);  // OpenBLAS's own pool, not OpenMP's
  // More ranks x threads on this node than cores: waiting ranks sleep
  // instead of spinning (comm/communicator.hpp), from the first collective
  // on (start-up is where hundreds of ranks wait longest).
  const bool oversubscribed = rt.local_size() * threads > usable_cores();
  MpiCommunicator::set_sleep_when_waiting(oversubscribed);
  if (oversubscribed && rank == 0)
    log0("oversubscribed: ", rt.local_size(), " rank(s) x ", threads, " thread(s) on ",
         usable_cores(), " core(s) of ", rt.host(), "; waiting ranks sleep between polls");
  MpiCommunicator world(MPI_COMM_WORLD, "world", cfg.runtime.timeout_s);
  const auto& par = cfg.parallel;
  Mesh mesh(world, MeshDims{par.pp, par.dp, par.cp, par.tp});
  // The backend (main.cpp checked that it runs this config): this rank's
  // device must be usable on every rank before any of them starts its
  // communicators (NCCL).
  Backend& be = backend_for(cfg);
  agree_on_setup(world, be.preflight(cfg, rt.local_rank(), rt.local_size()));
  const int dp = par.dp;
  const int dp_rank = mesh.coords().dp;

  // Again after MPI start-up, in case the MPI library replaced the handlers.
  install_signal_handlers();

  // Run folder: rank 0 picks the name, everyone gets it.
  std::string out = cfg.runtime.out, run_id;
  if (out.empty()) out = "results/runs/" + cfg.runtime.name + "-" + timestamp_compact();
  {
    std::vector<char> buf(4096 + 64, 0);
    if (rank == 0) std::snprintf(buf.data(), 4096, "%s", out.c_str());
    if (rank == 0) std::snprintf(buf.data() + 4096, 64, "%s", run_id_for(out).c_str());
    world.broadcast_bytes(buf.data(), int64_t(buf.size()), 0);
    out = buf.data();
    run_id = buf.data() + 4096;
    cfg.runtime.out = out;
  }

  // Setup that can fail on bad input: data first (a missing or bad token file).
  std::string setup_error;
  std::unique_ptr<TokenSource> src;
  std::unique_ptr<Evaluator> evaluator;  // data.val_path every train.eval_interval steps
  RunFolderLock run_lock;  // rank 0: this job owns the run folder until it exits
  try {
    src = make_source(cfg.data, cfg.train.seed, cfg.model.vocab_size, cfg.model.seq_len);
    // The ids of the first global batch now (nothing is written yet); each
    // later step checks its own batch (loader.check_step) before reading it.
    check_windows(*src, cfg.model.seq_len, 0, uint64_t(global_batch(cfg)));
    evaluator = Evaluator::make(cfg, dp, dp_rank);
    if (!src->format().empty()) cfg.data.format = src->format();  // auto -> detected, run.json
    fs::create_directories(out + "/telemetry");
    if (rank == 0) run_lock = RunFolderLock::acquire(out, rt.slurm().job_id);
  } catch (const UsageError& e) {
    setup_error = e.what();
  } catch (const fs::filesystem_error& e) {
    setup_error = std::string("runtime.out: cannot create run folder '") + out + "': " + e.what();
  }
  if (setup_error.empty()) setup_error = check_host_memory(cfg, rt);
  agree_on_setup(world, setup_error);
  if (rank == 0) log_open_file(out + "/log.txt");

  DataLoader loader(std::move(src), cfg.model.seq_len, cfg.train.micro_batch, cfg.train.grad_accum,
                    dp, dp_rank);
  auto engine = std::make_unique<Engine>(cfg, mesh, be);

  // The peak MFU is reported against: the backend's (the GPU's dense peak,
  // or runtime.cpu_peak_gflops), else the measured GEMM rate on CPU ranks in
  // the run's precision.
  double peak = 0;
  std::string peak_source;
  if (auto dp = be.peak(cfg)) {
    peak = dp->flops;
    peak_source = dp->source;
  } else {
    // Once per node: as many of its ranks as it has cores for measure at
    // once while the others wait; a rank's peak is its share of the node's
    // summed rate. The same figure as every rank measuring at once, without
    // hundreds of oversubscribed ranks each running a second of sgemm.
    const NodePeak np = measure_node_gemm(world, rt.node_index(), rt.local_rank(), rt.local_size(),
                                          threads, cfg.train.precision == "bf16");
    peak = np.per_rank;
    world.all_reduce_sum(&peak, 1);
    peak /= rt.world_size();
    peak_source = "measured " + np.what + " (768^3, " + std::to_string(threads) +
                  " threads/rank, " + std::to_string(np.measuring) + " of " +
                  std::to_string(rt.local_size()) + " ranks per node at once)";
  }

  const auto mshape = model_shape(cfg);
  const int64_t gb = global_batch(cfg);
  const bool recompute = cfg.train.act_ckpt != "none";
  const double model_flops_step = metrics::mpt_model_flops_per_seq(mshape) * double(gb);
  const double hw_flops_step = metrics::mpt_hw_flops_per_seq(mshape, recompute) * double(gb);

  RunInfo info{&rt,
               &cfg,
               count_params(cfg.model),
               peak,
               peak_source,
               threads,
               &mesh,
               be.device().name(),
               be.device().id(),
               be.ops().describe(),
               run_id};
  if (rank == 0) write_run_json(out + "/run.json", info);
  TelemetryWriter tel;
  tel.open(telemetry_path(out, rank), telemetry_header(info));

  // Checkpointing: resume first (any layout may have written it), then save
  // every checkpoint.interval steps in the background.
  TrainState tstate = engine->train_state();
  const std::string ckpt_dir =
      cfg.checkpoint.dir.empty() ? out + "/checkpoints" : cfg.checkpoint.dir;
  long start_step = 1;
  {
    std::string err;
    std::optional<std::string> from;
    try {
      from = pick_resume(cfg.checkpoint, ckpt_dir, world);
    } catch (const UsageError& e) {
      err = e.what();
    }
    if (err.empty()) err = check_checkpoint_dir(ckpt_dir, from.has_value(), rank);
    agree_on_setup(world, err);
    if (from) {
      const double tr = wall_time();
      long at = 0;
      try {
        at = restore(tstate, *from);
      } catch (const UsageError& e) {
        err = e.what();
      }
      agree_on_setup(world, err);
      engine->after_restore();
      start_step = at + 1;
      tel.event("ckpt_resume", at,
                {{"path", *from}, {"from_step", at}, {"load_s", wall_time() - tr}});
      log0("resumed from ", *from, " (step ", at, ") in ", wall_time() - tr, " s");
    }
  }
  std::unique_ptr<Checkpointer> ckpt;
  {
    CheckpointOptions co;
    co.dir = ckpt_dir;
    co.mode = cfg.checkpoint.mode == "sync" ? CkptMode::kSync : CkptMode::kAsync;
    co.keep_last_n = cfg.checkpoint.keep_last_n;
    co.on_error = cfg.checkpoint.on_error == "abort" ? CkptOnError::kAbort : CkptOnError::kContinue;
    co.timeout_s = cfg.runtime.timeout_s;
    co.layout = {{"dp", dp},
                 {"tp", cfg.parallel.tp},
                 {"pp", cfg.parallel.pp},
                 {"cp", cfg.parallel.cp},
                 {"zero_stage", cfg.parallel.zero_stage},
                 {"world_size", rt.world_size()}};
    // Fault injection for the crash tests: SCALETRAIN_FAULT=kill:RANK:STEP:PHASE
    // makes that rank SIGKILL itself (stop:...: SIGSTOP, a hung rank) at that
    // phase of that step's save.
    if (auto f = env("SCALETRAIN_FAULT")) {
      auto parts = split(*f, ':');
      if (parts.size() == 4 && (parts[0] == "kill" || parts[0] == "stop") &&
          std::stoi(parts[1]) == rank) {
        const long kstep = std::stol(parts[2]);
        const std::string kphase = parts[3];
        const int sig = parts[0] == "kill" ? SIGKILL : SIGSTOP;
        co.test_hook = [kstep, kphase, sig](const std::string& phase, long s) {
          if (s == kstep && phase == kphase) ::raise(sig);
        };
      }
    }
    ckpt = std::make_unique<Checkpointer>(MPI_COMM_WORLD, co, &tel);
  }

  log0("scaletrain ", run_banner(info));
  log0("data: ", loader.source().describe(), "; global batch ", gb, " x ", cfg.model.seq_len,
       " tokens; ", engine->num_buckets(), " gradient bucket(s); mesh ", mesh.describe());
  if (evaluator) log0("validation: ", evaluator->describe());
  log0("compute: ", info.compute);
  log0("run folder: ", out);

  const long total = cfg.train.steps;
  int exit_code = 0;
  double t_loop0 = wall_time(), steady_time = 0;
  long steady_steps = 0;
  const long last = cfg.train.stop_after > 0 ? std::min<long>(total, cfg.train.stop_after) : total;
  if (start_step > last) log0("nothing to do: checkpoint is at step ", start_step - 1);
  long step = start_step;
  for (; step <= last; ++step) {
    engine->begin_step();
    std::vector<Communicator*> comms = engine->comms();
    world.reset_stats();
    for (Communicator* g : comms) g->reset_stats();
    const double t_start_epoch = epoch_seconds();
    const double t0 = wall_time();

    loader.check_step(step);  // the same verdict on every rank: a bad id stops all (exit 2)
    StepOut so = engine->forward_backward(step, loader);
    const double loss = so.loss, gnorm = so.grad_norm;
    const double lr = lr_at(cfg.optim, step, total);
    bool skipped = !so.finite;
    if (skipped) {
      tel.event("nan_skip", step, {{"loss", loss}, {"grad_norm", gnorm}});
      logw("step ", step, ": loss ", loss, " grad_norm ", gnorm, " not finite; update skipped");
    }
    double exposed = so.exposed_s;
    const double optim_s = engine->apply(step, lr, gnorm, skipped, &exposed);
    const double data_s = so.data_s, fwd_s = so.fwd_s, bwd_s = so.bwd_s;

    // Signals (Slurm preemption): every rank must agree to stop together.
    double sig = pending_signal();
    {
      const double ts = wall_time();
      world.all_reduce_max(&sig, 1);
      exposed += wall_time() - ts;
    }

    // Checkpoint: the loop waits only for the snapshot (and a previous save
    // still in flight); the write happens in the background.
    double ckpt_stall = 0;
    const bool saving =
        sig > 0 || (cfg.checkpoint.interval > 0 && step % cfg.checkpoint.interval == 0);
    if (sig > 0) {
      tel.event("signal", step, {{"signal", signal_name(int(sig))}});
      log0("received ", signal_name(int(sig)), " at step ", step, "; emergency checkpoint");
      SaveStats ss =
          ckpt->emergency_save(step, checkpoint_state(tstate, step, loader.samples_consumed(step)));
      ckpt_stall = ss.stall_s;
      log0(ss.committed ? "emergency checkpoint committed" : "emergency checkpoint FAILED", " (",
           ss.stall_s, " s)");
    } else if (saving) {
      SaveStats ss =
          ckpt->save(step, checkpoint_state(tstate, step, loader.samples_consumed(step)));
      ckpt_stall = ss.stall_s;
    }
    const double step_s = wall_time() - t0;

    // Telemetry: one record per step per rank.
    json comm = json::object();
    double comm_s = 0;
    for (int k = 0; k < int(CollKind::kCount); ++k) {
      CollStats s = world.stats(CollKind(k));
      for (Communicator* g : comms) {
        const CollStats& w = g->stats(CollKind(k));
        s.seconds += w.seconds;
        s.bytes += w.bytes;
        s.calls += w.calls;
      }
      if (s.calls == 0) continue;
      comm[coll_name(CollKind(k))] = {{"s", s.seconds}, {"bytes", s.bytes}, {"calls", s.calls}};
      comm_s += s.seconds;
    }
    const EngineMemory mem = engine->memory();
    // Where the step's time went by kind of kernel, when the backend times them.
    const KernelSeconds ks = be.ops().take_kernel_seconds();
    const double alloc_s = be.device().take_alloc_seconds();
    json kernel = json::object();
    if (ks.known)
      kernel = {{"gemm", ks.gemm},
                {"attention", ks.attention},
                {"elementwise", ks.elementwise},
                {"optimizer", ks.optimizer},
                {"alloc", alloc_s}};
    const int64_t tokens =
        int64_t(cfg.train.micro_batch) * cfg.train.grad_accum * cfg.model.seq_len;
    tel.step({{"step", step},
              {"t_start", t_start_epoch},
              {"step_s", step_s},
              {"data_s", data_s},
              {"fwd_s", fwd_s},
              {"bwd_s", bwd_s},
              {"optim_s", optim_s},
              {"comm_s", comm_s},
              {"comm_exposed_s", exposed},
              {"comm_bucket_s", so.async_total_s},
              {"comm", comm},
              {"kernel_s", kernel},
              {"ckpt_stall_s", ckpt_stall},
              {"tokens", tokens},
              {"global_tokens", gb * cfg.model.seq_len},
              {"loss", loss},
              {"grad_norm", gnorm},
              {"lr", lr},
              {"mem_peak_bytes", mem.peak_total},
              {"mem_bytes",
               {{"params", mem.params},
                {"grads", mem.grads},
                {"optim", mem.optim},
                {"activations", mem.activations_peak}}}});

    // Progress (rank 0): the slowest rank's step time sets the pace.
    double slow = step_s;
    world.all_reduce_max(&slow, 1);
    if (step > cfg.train.warmup_steps_excluded) {
      steady_time += slow;
      ++steady_steps;
    }
    if (rank == 0 && (step % cfg.train.log_every == 0 || step == last || step == start_step)) {
      const double tok_s = double(gb * cfg.model.seq_len) / slow;
      const double mfu = model_flops_step / slow / (peak * rt.world_size());
      const double avg = steady_steps ? steady_time / steady_steps : slow;
      char line[256];
      std::snprintf(line, sizeof line,
                    "step %5ld/%ld | loss %.4f | %8.0f tok/s | MFU %5.1f%% | %7.1f ms | mem %s | "
                    "lr %.2e | ETA %s",
                    step, total, loss, tok_s, 100.0 * mfu, slow * 1e3,
                    human_bytes(double(mem.peak_total)).c_str(), lr,
                    fmt_eta(avg * double(total - step)).c_str());
      log0(line);
    }
    if (evaluator && sig == 0 && evaluator->due(step, last)) evaluator->run(step, *engine, tel);
    if (sig > 0) {
      exit_code = kExitPreempted;
      ++step;
      break;
    }
  }
  const long steps_done = step - 1;
  // Drain the background save before reporting.
  double t_drain = wall_time();
  ckpt->finalize();
  t_drain = wall_time() - t_drain;
  if (t_drain > 0.01) log0("waited ", t_drain, " s for the last checkpoint to commit");
  const double wall = wall_time() - t_loop0;
  tel.event("end", steps_done,
            {{"status", exit_code == 0 ? "ok" : "signal"}, {"wall_s", wall}, {"drain_s", t_drain}});
  tel.close();
  if (steady_steps > 0) {
    const double avg = steady_time / steady_steps;
    log0("done: ", steps_done - start_step + 1, " steps in ", wall, " s; steady state ",
         double(gb * cfg.model.seq_len) / avg, " tok/s, MFU ",
         100.0 * model_flops_step / avg / (peak * rt.world_size()), "% of ", peak / 1e9,
         " GFLOP/s per rank (", peak_source, "), HFU ",
         100.0 * hw_flops_step / avg / (peak * rt.world_size()), "%");
  }
  log0("run folder: ", out);
  return exit_code;
}
}  // namespace st
