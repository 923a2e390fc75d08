// The step-telemetry builder: one step's times, collectives, kernel split and
// memory into the record the telemetry schema describes (lib/telemetry/
// schema.cpp, docs/telemetry.md). Kept apart from the loop so the loop reads
// top to bottom and the record's shape is in one place.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "config/config.hpp"
#include "core/span_log.hpp"
#include "engine/engine.hpp"

namespace st {

// What the loop had of one step: forward/backward's loss and norm, and the
// step's seconds (fb.t, core/step_parts.hpp's StepMeasured: forward_backward
// fills data, fwd, bwd and comm_exposed; the loop the optimizer, its
// waits, the checkpoint stall and the whole step; the record the tp/cp
// waits).
struct StepResult {
  long step = 0;
  double t_start = 0;         // epoch seconds at the step's start
  double slowest_step_s = 0;  // the slowest rank's step: the pace every tok/s is read from
  double cpu_s = 0;           // this process's CPU time during the step, all threads
  double lr = 0;
  StepOut fb;
};

// The collectives of `world` and `comms` since their last reset_stats, summed
// by kind; *comm_s gets the total seconds.
nlohmann::json collective_stats(MpiCommunicator& world, const std::vector<Communicator*>& comms,
                                double* comm_s);

// The whole step record (TelemetryWriter::step fills in its type). Takes
// (resets) the backend's kernel and allocation timers.
nlohmann::json step_record(const StepResult& t, const Config& cfg, MpiCommunicator& world,
                           const std::vector<Communicator*>& comms, const EngineMemory& mem,
                           Backend& be);

// The trace record of a step (runtime.trace): its spans as the schema's
// objects (TelemetryWriter::trace fills in the type).
nlohmann::json trace_record(long step, const std::vector<spans::Span>& spans);

}  // namespace st
