// scaletrain: the trainer's entry point. Initialises MPI, parses the command
// line and the config (every rank, so every rank sees the same error), and
// hands over to run_training. Exit codes: 0 ok, 1 runtime error, 2 bad input
// (config, CLI, data), 3 stopped by SIGTERM/SIGUSR1 after an emergency
// checkpoint.
#include <cstdio>
#include <iostream>
#include <memory>

#include "backend/backend.hpp"
#include "cli.hpp"
#include "comm/mpi_communicator.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "phase_clock.hpp"
#include "precision.hpp"
#include "runtime/runtime.hpp"
#include "runtime/watchdog.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
  // Before anything else: a SIGUSR1/SIGTERM from Slurm during start-up must
  // not kill the rank (the default action); the loop acts on it later.
  st::install_signal_handlers();
  st::startup_clock().mark("launch");  // process start to main: exec, library loading
  std::unique_ptr<st::Runtime> rt;
  try {
    rt = std::make_unique<st::Runtime>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaletrain: cannot start MPI: %s\n", e.what());
    return 1;
  }
  st::startup_clock().mark_at("mpi_init", rt->init_wall(), rt->init_cpu());
  st::startup_clock().mark("runtime");  // node-local ranks, host names, the watchdog
  const bool root = rt->rank() == 0;
  int code = 0;
  try {
    st::Cli cli = st::parse_cli(argc, argv, root);
    if (cli.exit_now) return 0;
    st::Config cfg = st::load_config(cli.config, cli.sets);
    // --dry-run --world N plans N ranks from however many were launched.
    st::resolve_layout(cfg, cli.world > 0 ? cli.world : rt->world_size());
    {
      // The start-up vote on a group of its own (no flight recorder yet).
      st::MpiCommunicator world(MPI_COMM_WORLD, "precision vote", cfg.runtime.timeout_s);
      st::resolve_precision(cfg, world);
    }
    // What the device can run is the backend's answer (runtime.device=cuda
    // loads the CUDA backend library here, on every rank alike).
    const std::string why = st::backend_for(cfg).supports(cfg);
    if (!why.empty()) throw st::UsageError(why);
    st::startup_clock().mark("config");
    if (cli.dry_run) {
      st::print_dry_run(*rt, cfg);
      return 0;
    }
    code = st::run_training(*rt, std::move(cfg));
  } catch (const st::UsageError& e) {
    // Every rank parsed the same input, so every rank stops here together.
    if (root) std::cerr << "scaletrain: error: " << e.what() << "\n";
    code = 2;
  } catch (const std::exception& e) {
    // A failure on one rank: the others may be inside a collective. Say what
    // happened, then take the whole job down rather than hang.
    std::cerr << "scaletrain: rank " << rt->rank() << " failed: " << e.what() << "\n";
    // The flight recorder: what every rank that still answers was doing.
    st::watchdog::dump_all(
        std::string("error on rank ") + std::to_string(rt->rank()) + ": " + e.what(),
        "an error on rank " + std::to_string(rt->rank()));
    st::log_close_file();
    if (rt->world_size() > 1) rt->abort(1);
    code = 1;
  }
  st::log_close_file();
  return code;
}
