// The CPU's measured single-precision GEMM rate: the "peak" that MFU on CPU
// ranks is reported against (there is no datasheet figure for a shared VM).
#pragma once
namespace st {
// FLOP/s of cblas_sgemm at n x n x n with the current OpenMP/BLAS threads,
// best of a few repetitions lasting about `seconds` in all.
double measure_sgemm_flops(int n, double seconds);

class MpiCommunicator;
struct NodePeak {
  double per_rank = 0;  // this rank's share of its node's sgemm rate, FLOP/s
  int measuring = 0;    // ranks of the node that measured at once
};
// Collective over `world`: on each node (node_index), the first
// min(local_size, cores / threads) ranks measure at once (cores: this
// process's CPU affinity), the rest wait; every rank of the node gets the
// summed rate divided by local_size.
NodePeak measure_node_sgemm(MpiCommunicator& world, int node_index, int local_rank,
                            int local_size, int threads);
}  // namespace st
