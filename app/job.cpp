// Setting a training job up (job.hpp): threads, world and mesh, backend
// preflight, the run folder, data, engine, the peak MFU is measured against,
// run.json and the telemetry header, resume, and the checkpointer.
#include "job.hpp"

#include <cblas.h>
#include <omp.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "ckpt_storage.hpp"
#include "convert/hf_llama.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "core/log.hpp"
#include "core/span_log.hpp"
#include "core/util.hpp"
#include "cpu_peak.hpp"
#include "engine/train_state.hpp"
#include "host_memory.hpp"
#include "live_tensorboard.hpp"
#include "model/model.hpp"
#include "phase_clock.hpp"
#include "prediction.hpp"
#include "runtime/flight_recorder.hpp"
#include "telemetry/paths.hpp"
#include "trainer.hpp"

namespace fs = std::filesystem;

namespace st {

void record_clock(Job& j, long step, const char* when) {
  const ClockOffset c = measure_clock_offset(*j.world, *j.node);
  flight::set_clock_offset(c.offset_s, c.error_s);
  j.tel.event(
      "clock", step,
      {{"offset_s", c.offset_s}, {"error_s", c.error_s}, {"rtt_s", c.rtt_s}, {"when", when}});
}

spans::TraceLevel trace_level(const std::string& s) {
  return s == "off"      ? spans::TraceLevel::kOff
         : s == "phases" ? spans::TraceLevel::kPhases
                         : spans::TraceLevel::kCollectives;
}

void agree_on_setup(MpiCommunicator& world, const std::string& local_error) {
  // The lowest failing rank wins: max of (size - rank) over the failing ones.
  double first = local_error.empty() ? 0.0 : double(world.size() - world.rank());
  world.all_reduce_max(&first, 1);
  if (first <= 0) return;
  const int root = world.size() - int(first);
  std::vector<char> why(2048, 0);
  if (world.rank() == root) std::snprintf(why.data(), why.size(), "%s", local_error.c_str());
  world.broadcast_bytes(why.data(), int64_t(why.size()), root);
  if (!local_error.empty()) throw UsageError(local_error);
  throw UsageError("rank " + std::to_string(root) + " failed its setup checks: " + why.data());
}

namespace {

// Rank 0 picks the run folder's name and id; everyone gets them.
void agree_on_run_folder(Job& j) {
  std::string out = j.cfg.runtime.out;
  if (out.empty()) out = "results/runs/" + j.cfg.runtime.name + "-" + timestamp_compact();
  std::vector<char> buf(4096 + 64, 0);
  if (j.rt->rank() == 0) {
    std::snprintf(buf.data(), 4096, "%s", out.c_str());
    std::snprintf(buf.data() + 4096, 64, "%s", run_id_for(out).c_str());
  }
  j.world->broadcast_bytes(buf.data(), int64_t(buf.size()), 0);
  j.out = buf.data();
  j.run_id = buf.data() + 4096;
  j.cfg.runtime.out = j.out;
}

// The peak MFU is reported against: the backend's (the GPU's dense peak, or
// runtime.cpu_peak_gflops), else the measured GEMM rate on CPU ranks in the
// run's precision.
void pick_peak(Job& j) {
  if (auto dp = j.be->peak(j.cfg)) {
    j.peak = dp->flops;
    j.peak_source = dp->source;
    return;
  }
  // Once per node: as many of its ranks as it has cores for measure at once
  // while the others wait; a rank's peak is its share of the node's summed
  // rate. The same figure as every rank measuring at once, without hundreds
  // of oversubscribed ranks each running a second of sgemm.
  const Runtime& rt = *j.rt;
  const NodePeak np = measure_node_gemm(*j.node, j.host, j.cfg.train.precision == "bf16");
  j.peak = np.per_rank;
  j.world->all_reduce_sum(&j.peak, 1);
  j.peak /= rt.world_size();
  j.peak_source = "measured " + np.what + " (768^3, " + std::to_string(j.threads) +
                  " threads/rank, " + std::to_string(np.measuring) + " of " +
                  std::to_string(rt.local_size()) + " ranks per node at once)";
  // What was measured, per thread, beside the kernel OpenBLAS chose (the
  // compute line names it): a user comparing OPENBLAS_CORETYPE settings
  // compares these figures, not a promised speed-up.
  log0(np.what, " measured: ", j.peak / 1e9, " GFLOP/s per rank, ", j.peak / 1e9 / j.threads,
       " GFLOP/s per thread");
}

// model.init_from: the folder's config.json and every tensor header against
// the model (UsageError naming the file and tensor); reads no weights.
void check_init_from(const ModelCfg& m) {
  if (m.init_from.empty()) return;
  try {
    hf::Folder f(m.init_from, m);
  } catch (const UsageError& e) {
    throw UsageError(std::string("model.init_from: ") + e.what());
  }
}

// The initial weights from a Hugging Face folder: every rank reads the rows
// of the pieces it holds (the sharding a resume reads), then the compute
// copies are refreshed. The moments stay zero, as in a fresh run.
void init_from(Job& j) {
  const double t0 = wall_time();
  std::string err;
  try {
    const hf::Folder f(j.cfg.model.init_from, j.cfg.model);
    init_params(j.engine->state(), [&f](std::vector<ShardView>& v) { f.read(v); });
  } catch (const UsageError& e) {
    err = std::string("model.init_from: ") + e.what();
  }
  agree_on_setup(*j.world, err);
  j.engine->after_restore();
  log0("initial weights from ", j.cfg.model.init_from, " in ", wall_time() - t0, " s");
}

// Resume first (any layout may have written the checkpoint).
void resume(Job& j, const std::string& ckpt_dir) {
  std::string err;
  std::optional<std::string> from;
  const double t_pick = wall_time();
  try {
    from = pick_resume(j.cfg.checkpoint, ckpt_dir, *j.world);
  } catch (const UsageError& e) {
    err = e.what();
  }
  if (err.empty()) err = check_checkpoint_dir(ckpt_dir, from.has_value(), j.rt->rank());
  agree_on_setup(*j.world, err);
  if (!from) {
    if (!j.cfg.model.init_from.empty()) init_from(j);
    return;
  }
  const double tr = wall_time();
  long at = 0;
  while (true) {
    std::string damaged;  // a data block failed its CRC32C on this rank
    try {
      at = restore(j.engine->state(), j.cfg, *from);
    } catch (const UsageError& e) {
      err = e.what();
    } catch (const Error& e) {
      damaged = e.what();
    }
    agree_on_setup(*j.world, err);
    double bad = damaged.empty() ? 0.0 : 1.0;
    j.world->all_reduce_max(&bad, 1);
    if (bad == 0.0) break;
    if (!damaged.empty()) logw("checkpoint skipped: ", *from, ": ", damaged);
    const bool folder = fs::exists(fs::path(j.cfg.checkpoint.resume) / "index.json");
    if (folder) {
      err = damaged.empty() ? "" : "checkpoint.resume: '" + *from + "' is not loadable: " + damaged;
      agree_on_setup(*j.world, err);
    }
    log0("checkpoint ", *from,
         " did not load (a damaged block; the rank that read it names it); trying older steps");
    from = pick_resume(j.cfg.checkpoint, ckpt_dir, *j.world,
                       parse_step_dir(fs::path(*from).filename().string()));
    if (!from) {  // nothing older loads: refused like a run that finds no good step
      agree_on_setup(*j.world, check_checkpoint_dir(ckpt_dir, false, j.rt->rank()));
      throw UsageError("checkpoint: no loadable step left in '" + ckpt_dir + "'");
    }
  }
  j.engine->after_restore();
  j.start_step = at + 1;
  // restore_s: the whole restore (the step's choice, its metadata check and
  // the load), beside the checkpoint's bytes: the study's restore bandwidth.
  int64_t bytes = 0;
  try {
    bytes = nlohmann::json::parse(read_file(*from + "/index.json")).value("bytes", int64_t(0));
  } catch (const std::exception&) {
  }
  j.tel.event("ckpt_resume", at,
              {{"path", *from},
               {"from_step", at},
               {"load_s", wall_time() - tr},
               {"restore_s", wall_time() - t_pick},
               {"bytes", bytes}});
  log0("resumed from ", *from, " (step ", at, ") in ", wall_time() - tr, " s");
}

// Saves every checkpoint.interval steps in the background.
std::unique_ptr<Checkpointer> make_checkpointer(Job& j, const std::string& ckpt_dir,
                                                double disk_write_Bps) {
  const Config& cfg = j.cfg;
  CheckpointOptions co;
  co.dir = ckpt_dir;
  co.disk_write_Bps = disk_write_Bps;
  co.mode = cfg.checkpoint.mode == "sync" ? CkptMode::kSync : CkptMode::kAsync;
  co.keep_last_n = cfg.checkpoint.keep_last_n;
  co.on_error = cfg.checkpoint.on_error == "abort" ? CkptOnError::kAbort : CkptOnError::kContinue;
  co.timeout_s = cfg.runtime.timeout_s;
  co.layout = {{"dp", cfg.parallel.dp},
               {"tp", cfg.parallel.tp},
               {"pp", cfg.parallel.pp},
               {"cp", cfg.parallel.cp},
               {"zero_stage", cfg.parallel.zero_stage},
               {"world_size", j.rt->world_size()}};
  // Fault injection for the crash tests: SCALETRAIN_FAULT=kill:RANK:STEP:PHASE
  // makes that rank SIGKILL itself (stop:...: SIGSTOP, a hung rank) at that
  // phase of that step's save, or at the step's start for PHASE `step`.
  if (auto f = env("SCALETRAIN_FAULT")) {
    auto parts = split(*f, ':');
    if (parts.size() == 4 && (parts[0] == "kill" || parts[0] == "stop") &&
        std::stoi(parts[1]) == j.rt->rank()) {
      const long kstep = std::stol(parts[2]);
      const std::string kphase = parts[3];
      const int sig = parts[0] == "kill" ? SIGKILL : SIGSTOP;
      if (kphase == "step") {  // at the start of that step (the hang tests)
        j.fault_step = kstep;
        j.fault_signal = sig;
      } else {
        co.test_hook = [kstep, kphase, sig](const std::string& phase, long s) {
          if (s == kstep && phase == kphase) ::raise(sig);
        };
      }
    }
  }
  // A slowed writer (checkpoint.test_busy_write_s): busy, not asleep, so it
  // takes a core from the training threads as a heavy writer would.
  if (const double busy = cfg.checkpoint.test_busy_write_s; busy > 0) {
    auto prev = co.test_hook;
    co.test_hook = [busy, prev](const std::string& phase, long s) {
      if (prev) prev(phase, s);
      if (phase != "written") return;
      volatile double x = 0;
      for (const double end = wall_time() + busy; wall_time() < end;)
        for (int i = 0; i < 10000; ++i) x = x + 1e-9 * i;
    };
  }
  return std::make_unique<Checkpointer>(*j.world, co, &j.tel);
}

}  // namespace

namespace {
// Threads per rank, and how waiting ranks wait (spin or sleep), from the
// host's share of CPUs (core/host.hpp); the flight recorder's level.
void set_threads(Job& j, Runtime& rt) {
  const int rank = rt.rank();
  j.host = rt.host_share(j.cfg.runtime.threads);
  const HostShare& host = j.host;
  j.threads = host.threads;
  omp_set_num_threads(j.threads);
  openblas_set_num_threads(j.threads);  // OpenBLAS's own pool, not OpenMP's
  if (!j.cfg.train.precision_choice.empty() && rank == 0)
    log0("train.precision: ", j.cfg.train.precision, " (", j.cfg.train.precision_choice, ")");
  // From the first collective on (start-up is where hundreds of ranks wait
  // longest).
  set_wait_host(host);
  MpiCommunicator::set_rings(j.cfg.runtime.mpi_ring);
  if (host.oversubscribed() && rank == 0)
    log0("oversubscribed: ", host.describe(), " of ", rt.host(),
         "; waiting ranks sleep between polls");
  // The flight recorder before the first communicator (it registers them);
  // where it writes once the run folder is known.
  spans::set_level(trace_level(j.cfg.runtime.trace));
  flight::configure("", rank, rt.host(), j.cfg.runtime.flight_recorder);
}

// Setup that can fail on bad input, agreed on by every rank before any
// writes: the token source (a missing or bad token file), the first batch's
// ids, the init checkpoint's headers, the evaluator, the run folder's
// telemetry folder, lock and TensorBoard file. Returns the token source.
std::unique_ptr<TokenSource> open_data(Job& j, Runtime& rt) {
  const int rank = rt.rank();
  const auto& par = j.cfg.parallel;
  std::string setup_error;
  std::unique_ptr<TokenSource> src;
  try {
    // data.verify=full: rank 0 reads every id once (agree_on_setup tells the others).
    src = make_source(j.cfg.data, j.cfg.train.seed, j.cfg.model.vocab_size, j.cfg.model.seq_len,
                      j.cfg.data.verify == "full" && rank == 0);
    // The ids of the first global batch now (nothing is written yet); each
    // later step checks its own batch (loader.check_step) before reading it.
    check_windows(*src, j.cfg.model.seq_len, 0, uint64_t(global_batch(j.cfg)));
    check_init_from(j.cfg.model);  // its headers against the model, before anything is written
    j.evaluator = Evaluator::make(j.cfg, par.dp, j.mesh->coords().dp);
    if (!src->format().empty()) j.cfg.data.format = src->format();  // auto -> detected, run.json
    fs::create_directories(j.out + "/telemetry");
    if (rank == 0) j.run_lock = RunFolderLock::acquire(j.out, rt.slurm().job_id);
    open_tensorboard(j);
  } catch (const UsageError& e) {
    setup_error = e.what();
  } catch (const fs::filesystem_error& e) {
    setup_error = std::string("runtime.out: cannot create run folder '") + j.out + "': " + e.what();
  }
  agree_on_setup(*j.world, setup_error);
  return src;
}

RunInfo run_info(Job& j, Runtime& rt) {
  return RunInfo{&rt,
                 &j.cfg,
                 count_params(j.cfg.model),
                 j.peak,
                 j.peak_source,
                 j.threads,
                 j.mesh.get(),
                 j.be->device().name(),
                 j.be->device().id(),
                 j.be->ops().describe(),
                 j.run_id,
                 -1,
                 ""};
}
}  // namespace

std::unique_ptr<Job> setup_job(Runtime& rt, Config cfg) {
  auto job = std::make_unique<Job>();
  Job& j = *job;
  j.cfg = std::move(cfg);
  j.rt = &rt;
  const int rank = rt.rank();
  set_threads(j, rt);
  PhaseClock& clock = startup_clock();
  j.world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", j.cfg.runtime.timeout_s);
  j.node = j.world->split(rt.node_index(), rt.local_rank(), "node");
  const auto& par = j.cfg.parallel;
  j.mesh = std::make_unique<Mesh>(*j.world, MeshDims{par.pp, par.dp, par.cp, par.tp});
  clock.mark("mesh");
  // The backend (main.cpp checked that it runs this config): this rank's
  // device must be usable on every rank before any of them starts its
  // communicators (NCCL).
  j.be = &backend_for(j.cfg);
  agree_on_setup(*j.world, j.be->preflight(j.cfg, rt.local_rank(), rt.local_size()));
  clock.mark("preflight");

  // Again after MPI start-up, in case the MPI library replaced the handlers.
  install_signal_handlers();
  agree_on_run_folder(j);

  // A model beyond this host's memory or a rank's address space is refused
  // before anything is opened or written.
  int64_t host_share = -1;
  agree_on_setup(*j.world, check_host_memory(j.cfg, rt, *j.node, &host_share));
  clock.mark("host_memory");

  std::unique_ptr<TokenSource> src = open_data(j, rt);
  clock.mark("data_open");
  if (rank == 0) log_open_file(j.out + "/log.txt");
  {
    // A dump of an earlier start of this folder would describe another job;
    // the folder is made by the first dump (none on a normal end).
    const std::string fpath = j.out + "/flight/" + telemetry::rank_file_name(rank, ".json");
    std::error_code ec;
    fs::remove(fpath, ec);
    flight::configure(fpath, rank, rt.host(), j.cfg.runtime.flight_recorder);
  }
  j.loader =
      std::make_unique<DataLoader>(std::move(src), j.cfg.model.seq_len, j.cfg.train.micro_batch,
                                   j.cfg.train.grad_accum, par.dp, j.mesh->coords().dp);
  j.engine = std::make_unique<Engine>(j.cfg, *j.mesh, *j.be);
  j.lr = LrSchedule(j.cfg.optim, j.cfg.train.steps);
  clock.mark("engine");  // the model, its state and the device communicators
  pick_peak(j);
  clock.mark("peak");

  j.info = run_info(j, rt);
  set_memory_capacity(j.info, j.be->device(), host_share, rt);
  if (rank == 0) write_run_json(j.out + "/run.json", j.info);
  if (rank == 0) add_prediction(j.out + "/run.json", j.cfg, rt.world_size());
  clock.mark("run_json");  // rank 0: run.json and the prediction (a recorded step)
  start_tensorboard(j);
  j.tel.open(telemetry::rank_telemetry_path(j.out, rank), telemetry_header(j.info));
  clock.mark("telemetry_open");
  record_clock(j, 0, "start");
  clock.mark("clock_sync");

  const std::string ckpt_dir =
      j.cfg.checkpoint.dir.empty() ? j.out + "/checkpoints" : j.cfg.checkpoint.dir;
  resume(j, ckpt_dir);
  clock.mark("resume");  // the cold restore: verification and load
  const double disk_Bps = probe_checkpoint_storage(j, ckpt_dir);  // run.json `storage`
  j.ckpt = make_checkpointer(j, ckpt_dir, disk_Bps);
  clock.mark("checkpointer");
  // The snapshot buffers now, touched: the first save paid their page faults.
  if (j.cfg.checkpoint.interval > 0) {
    j.ckpt->prepare(checkpoint_state(j.engine->state(), j.cfg, j.start_step - 1, 0));
    clock.mark("checkpoint_buffers");
  }
  return job;
}

}  // namespace st
