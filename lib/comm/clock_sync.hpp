// One clock for all ranks: each rank's offset to rank 0's wall clock,
// measured by MPI ping-pongs (Cristian's method, best of several rounds), with
// its error bound (half the best round trip). The trainer measures it at the
// start and the end of a run and records both in the telemetry, so a trace
// puts every rank's events on rank 0's clock and states how far to trust it.
#pragma once
#include "comm/mpi_communicator.hpp"

namespace st {

struct ClockOffset {
  double offset_s = 0;  // add to this rank's epoch seconds to get rank 0's
  double error_s = 0;   // |true offset - offset_s| <= error_s
  double rtt_s = 0;     // the best round trip
};

// Collective over `world`: rank 0 answers every other rank in turn, `rounds`
// ping-pongs each (timeouts as the communicator's). Rank 0 gets {0, 0, 0}.
ClockOffset measure_clock_offset(MpiCommunicator& world, int rounds = 8);

}  // namespace st
