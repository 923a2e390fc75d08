// Implementation of cpu_peak.hpp.
#include "cpu_peak.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/util.hpp"
#include "runtime/runtime.hpp"

namespace st {
double measure_sgemm_flops(int n, double seconds) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n, 0.f);
  double best = 0;
  double t_end = wall_time() + seconds;
  int reps = 0;
  do {
    double t0 = wall_time();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
                0.f, c.data(), n);
    double dt = wall_time() - t0;
    if (reps > 0) best = std::max(best, 2.0 * n * double(n) * n / dt);  // first rep warms up
    ++reps;
  } while (wall_time() < t_end || reps < 3);
  return best;
}

NodePeak measure_node_sgemm(MpiCommunicator& world, int node_index, int local_rank,
                            int local_size, int threads) {
  // Ranks of one node may see different masks (binding): take the node's
  // smallest, so no two measuring ranks share a core they think is theirs.
  double c = -double(usable_cores());
  auto node = world.split(node_index, local_rank, "node");
  node->all_reduce_max(&c, 1);
  NodePeak r;
  r.measuring = std::clamp(int(-c) / std::max(1, threads), 1, local_size);
  double rate = local_rank < r.measuring ? measure_sgemm_flops(768, 1.0) : 0.0;
  node->all_reduce_sum(&rate, 1);
  r.per_rank = rate / local_size;
  return r;
}
}  // namespace st
