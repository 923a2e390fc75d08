// Implementation of clock_sync.hpp. A rank sends a ping at its t1, rank 0
// answers with its own time t0, the rank receives at t2: rank 0's clock read
// t0 somewhere in [t1, t2] of ours, so offset = t0 - (t1 + t2) / 2 within
// (t2 - t1) / 2. The round with the shortest trip bounds the error best.
#include "comm/clock_sync.hpp"

#include <mpi.h>
#include <time.h>

#include <limits>

#include "core/error.hpp"
#include "core/span_log.hpp"

namespace st {
using spans::epoch_now;

ClockOffset measure_clock_offset(MpiCommunicator& world, int rounds) {
  constexpr int kTag = 30080;
  ClockOffset best;
  if (world.size() == 1) return best;
  const MPI_Comm c = world.mpi();
  if (world.rank() == 0) {
    for (int r = 1; r < world.size(); ++r)
      for (int k = 0; k < rounds; ++k) {
        double ping = 0;
        MPI_Request q;
        ST_MPI_CHECK(MPI_Irecv(&ping, 1, MPI_DOUBLE, r, kTag, c, &q));
        world.wait_request(&q, "clock ping");
        const double t0 = epoch_now();
        ST_MPI_CHECK(MPI_Isend(&t0, 1, MPI_DOUBLE, r, kTag, c, &q));
        world.wait_request(&q, "clock pong");
      }
    return best;
  }
  best.rtt_s = std::numeric_limits<double>::infinity();
  for (int k = 0; k < rounds; ++k) {
    double t1 = epoch_now(), t0 = 0;
    MPI_Request q[2];
    ST_MPI_CHECK(MPI_Irecv(&t0, 1, MPI_DOUBLE, 0, kTag, c, &q[1]));
    ST_MPI_CHECK(MPI_Isend(&t1, 1, MPI_DOUBLE, 0, kTag, c, &q[0]));
    world.wait_request(&q[0], "clock ping");
    world.wait_request(&q[1], "clock pong");
    const double t2 = epoch_now();
    if (t2 - t1 < best.rtt_s) {
      best.rtt_s = t2 - t1;
      best.offset_s = t0 - 0.5 * (t1 + t2);
      best.error_s = 0.5 * (t2 - t1);
    }
  }
  return best;
}

}  // namespace st
