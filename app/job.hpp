// A training job once set up: everything run_training's loop needs (world,
// mesh, backend, run folder, data, engine, telemetry, checkpoints), built by
// setup_job in the order the ranks must agree on. Setup that can fail on bad
// input fails on every rank together, with the failing rank's reason.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/clock_sync.hpp"
#include "comm/mpi_communicator.hpp"
#include "config/config.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"
#include "engine/train_state.hpp"
#include "evaluate.hpp"
#include "parallel/mesh.hpp"
#include "run_info.hpp"
#include "runtime/run_lock.hpp"
#include "runtime/runtime.hpp"
#include "telemetry/writer.hpp"
#include "tensorboard/tensorboard.hpp"

namespace st {

struct Job {
  Config cfg;
  Runtime* rt = nullptr;
  int threads = 1;  // compute threads of this rank (host.threads)
  HostShare host;   // this rank's share of its node's CPUs (core/host.hpp)
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<MpiCommunicator> node;  // the ranks of this host (once-per-host work)
  std::unique_ptr<Mesh> mesh;
  Backend* be = nullptr;
  std::string out, run_id;  // the run folder and its id
  RunFolderLock run_lock;   // rank 0: this job owns the run folder until it exits
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<Evaluator> evaluator;  // data.val_path every train.eval_interval steps
  std::unique_ptr<Engine> engine;
  LrSchedule lr;    // optim.* over train.steps, parsed once
  double peak = 0;  // FLOP/s per rank MFU is reported against
  std::string peak_source;
  RunInfo info{};
  // Rank 0, runtime.tensorboard: fed by tel, so it outlives it (declared first).
  std::unique_ptr<tensorboard::LiveWriter> tb;
  TelemetryWriter tel;
  std::unique_ptr<Checkpointer> ckpt;
  long start_step = 1;             // after a resume, the checkpoint's step + 1
  double ckpt_write_expect_s = 0;  // a save's write at the probed bandwidth (ckpt_storage.hpp)
  // Fault injection for the hang tests (SCALETRAIN_FAULT=stop|kill:RANK:STEP:step):
  // the step at whose start this rank stops or kills itself, and the signal.
  long fault_step = -1;
  int fault_signal = 0;
};

// Measures this rank's clock against rank 0's (comm/clock_sync.hpp) and
// records it: a `clock` telemetry event, and the flight recorder's offset.
// Collective over the world. `when` is "start" or "end".
void record_clock(Job& j, long step, const char* when);

// Collective over MPI_COMM_WORLD. Throws UsageError (the same on every rank,
// naming the rank that failed and why) when any rank's setup check fails.
// The Job must not move (RunInfo points into it), hence the pointer.
std::unique_ptr<Job> setup_job(Runtime& rt, Config cfg);

// Throws the same UsageError on every rank if any rank's local_error is not
// empty: that rank's own text on it, and "rank R failed its setup checks: "
// with the lowest failing rank's text on the others (rank 0 prints first).
void agree_on_setup(MpiCommunicator& world, const std::string& local_error);

}  // namespace st
