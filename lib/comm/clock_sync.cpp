// Implementation of clock_sync.hpp. A child sends a ping at its t1, its
// parent answers with its own estimate of rank 0's time, t0 (its clock plus
// its offset), and that offset's bound; the child receives at t2: rank 0's
// clock read t0 somewhere in [t1, t2] of ours, so offset = t0 - (t1 + t2) / 2
// within (t2 - t1) / 2 plus the parent's bound. The round with the shortest
// trip bounds the error best.
#include "comm/clock_sync.hpp"

#include <mpi.h>

#include <limits>

#include "core/error.hpp"
#include "core/span_log.hpp"

namespace st {
using spans::epoch_now;

namespace {
constexpr int kTag = 30080;

// The parent's side of one hop: `rounds` pongs to `child`, each carrying
// {this rank's time on rank 0's clock, its error bound}.
void answer(MpiCommunicator& c, int child, int rounds, const ClockOffset& mine) {
  for (int k = 0; k < rounds; ++k) {
    double ping = 0;
    MPI_Request q;
    ST_MPI_CHECK(MPI_Irecv(&ping, 1, MPI_DOUBLE, child, kTag, c.mpi(), &q));
    c.wait_request(&q, "clock ping");
    const double pong[2] = {epoch_now() + mine.offset_s, mine.error_s};
    ST_MPI_CHECK(MPI_Isend(pong, 2, MPI_DOUBLE, child, kTag, c.mpi(), &q));
    c.wait_request(&q, "clock pong");
  }
}

// The child's side: the best of `rounds` ping-pongs with `parent`.
ClockOffset ask(MpiCommunicator& c, int parent, int rounds) {
  ClockOffset best;
  best.rtt_s = std::numeric_limits<double>::infinity();
  for (int k = 0; k < rounds; ++k) {
    double t1 = epoch_now(), pong[2] = {0, 0};
    MPI_Request q[2];
    ST_MPI_CHECK(MPI_Irecv(pong, 2, MPI_DOUBLE, parent, kTag, c.mpi(), &q[1]));
    ST_MPI_CHECK(MPI_Isend(&t1, 1, MPI_DOUBLE, parent, kTag, c.mpi(), &q[0]));
    c.wait_request(&q[0], "clock ping");
    c.wait_request(&q[1], "clock pong");
    const double t2 = epoch_now();
    if (t2 - t1 < best.rtt_s) {
      best.rtt_s = t2 - t1;
      best.offset_s = pong[0] - 0.5 * (t1 + t2);
      best.error_s = 0.5 * (t2 - t1) + pong[1];
    }
  }
  return best;
}
}  // namespace

ClockOffset measure_clock_offset(MpiCommunicator& world, MpiCommunicator& node, int rounds,
                                 std::vector<ClockHop>* hops) {
  ST_INTERNAL_CHECK(world.rank() != 0 || node.rank() == 0,
                    "clock sync: world rank 0 must be its node's rank 0 (got node rank ",
                    node.rank(), ")");
  ClockOffset mine;
  if (world.size() == 1) return mine;
  const bool leader = node.rank() == 0;
  // One group per host's leader, in world order: world rank 0 is its rank 0.
  auto leaders = world.split(leader ? 0 : 1, world.rank(), "clock leaders");
  if (leader) {
    const int i = leaders->rank(), n = leaders->size();
    // The leaders' world ranks, for the record of who talked to whom.
    std::vector<double> world_of(hops ? size_t(n) : 0, 0.0);
    if (hops) {
      world_of[size_t(i)] = world.rank();
      leaders->all_reduce_sum(world_of.data(), int64_t(n));
    }
    int level = 0;
    for (int k = 1; k < n; k <<= 1, ++level) {
      if (i < k && i + k < n) {
        answer(*leaders, i + k, rounds, mine);
        if (hops) hops->push_back({level, int(world_of[size_t(i + k)]), true});
      } else if (i >= k && i < 2 * k) {
        mine = ask(*leaders, i - k, rounds);
        if (hops) hops->push_back({level, int(world_of[size_t(i - k)]), false});
      }
    }
  }
  double v[3] = {mine.offset_s, mine.error_s, mine.rtt_s};
  node.broadcast_bytes(v, int64_t(sizeof v), 0);
  return {v[0], v[1], v[2]};
}

}  // namespace st
