// One clock for all ranks: each rank's offset to rank 0's wall clock,
// measured by MPI ping-pongs (Cristian's method, best of several rounds), with
// its error bound (half the best round trip, summed along the path to rank 0).
// The trainer measures it at the start and the end of a run and records both
// in the telemetry, so a trace puts every rank's events on rank 0's clock and
// states how far to trust it.
//
// The ranks of one host read one kernel clock, so only one rank per host (its
// node rank 0, the leader) measures; the others take its figures. The
// leaders measure along a binomial tree rooted at rank 0: in round k
// (k = 1, 2, 4, ...) leader i < k answers leader i + k, whose offset is its
// own to i plus i's to rank 0. The depth is ceil(log2(hosts)) rounds, not
// one round per rank, and the error bound is the sum of the hops' bounds.
#pragma once
#include <vector>

#include "comm/mpi_communicator.hpp"

namespace st {

struct ClockOffset {
  double offset_s = 0;  // add to this rank's epoch seconds to get rank 0's
  double error_s = 0;   // |true offset - offset_s| <= error_s
  double rtt_s = 0;     // the best round trip of the last hop (the leader's to its parent)
};

// One hop this rank took part in: in tree round `level` (0, 1, 2, ...) it
// answered (`parent` true) or asked the world rank `peer`. What the tests
// read to check who talks to whom: ceil(log2(hosts)) rounds, rank 0 in one
// hop a round, every other leader asking exactly once.
struct ClockHop {
  int level = 0, peer = -1;
  bool parent = false;
};

// Collective over `world` and `node` (the ranks of this rank's host; world
// rank 0 must be its node's rank 0): `rounds` ping-pongs per tree hop
// (timeouts as the communicator's). Rank 0 and the other ranks of its host
// get {0, 0, 0}. `hops`, when given, gets this rank's hops in order.
ClockOffset measure_clock_offset(MpiCommunicator& world, MpiCommunicator& node, int rounds = 8,
                                 std::vector<ClockHop>* hops = nullptr);

}  // namespace st
