// Implementation of cpu_peak.hpp.
#include "cpu_peak.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/host.hpp"
#include "core/util.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "runtime/runtime.hpp"
#include "tensor/dtype.hpp"

namespace st {
double measure_gemm_flops(int n, double seconds, bool bf16) {
  const size_t nn = size_t(n) * size_t(n);
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn, 0.f);
  std::vector<uint16_t> ah(nn, f32_to_bf16(0.5f)), bh(nn, f32_to_bf16(0.25f));
  double best = 0;
  double t_end = wall_time() + seconds;
  int reps = 0;
  do {
    double t0 = wall_time();
    if (bf16)
      kernels::gemm_bf16(false, false, n, n, n, 1.f, ah.data(), n, bh.data(), n, 0.f, c.data(), n,
                         false);
    else
      kernels::gemm(false, false, n, n, n, 1.f, a.data(), b.data(), 0.f, c.data());
    double dt = wall_time() - t0;
    if (reps > 0) best = std::max(best, 2.0 * n * double(n) * n / dt);  // first rep warms up
    ++reps;
  } while (wall_time() < t_end || reps < 3);
  return best;
}

NodePeak measure_node_gemm(MpiCommunicator& node, const HostShare& host, bool bf16) {
  // The CPUs the node's ranks may use together (the union of their masks,
  // capped by a quota; their smallest mask would let one of two ranks bound
  // to a core each measure, and halve the node's rate), agreed on.
  double cpus = host.cpus();
  node.all_reduce_max(&cpus, 1);
  NodePeak r;
  const int threads = std::max(1, host.threads);
  r.measuring = std::clamp(int(std::floor(cpus / threads + 1e-9)), 1, node.size());
  double rate = node.rank() < r.measuring ? measure_gemm_flops(768, 1.0, bf16) : 0.0;
  node.all_reduce_sum(&rate, 1);
  r.per_rank = rate / node.size();
  r.what = bf16 ? "bf16 GEMM (" + kernels::gemm_bf16_library() + ")" : std::string("sgemm");
  return r;
}
}  // namespace st
