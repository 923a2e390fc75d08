// The CPU's measured GEMM rate in the run's precision: the "peak" that MFU
// on CPU ranks is reported against (there is no datasheet figure for a
// shared VM). A bf16 run is measured on the bf16 GEMM it trains with
// (oneDNN's bf16 matmul where the CPU has bf16 instructions), an fp32 run
// on the fp32 sgemm.
#pragma once
#include <string>

namespace st {
// FLOP/s of the CPU backend's GEMM (kernels/cpu: gemm, or gemm_bf16 when
// bf16) at n x n x n with the current OpenMP/BLAS threads, best of a few
// repetitions lasting about `seconds` in all.
double measure_gemm_flops(int n, double seconds, bool bf16);

class MpiCommunicator;
struct NodePeak {
  double per_rank = 0;  // this rank's share of its node's GEMM rate, FLOP/s
  int measuring = 0;    // ranks of the node that measured at once
  std::string what;     // "sgemm" or "bf16 GEMM (oneDNN ...)", for the peak's source
};
struct HostShare;
// Collective over `node` (the ranks of one host, sharing it as `host`
// says): its first min(size, CPUs / threads) ranks measure at once, the
// rest wait; every rank of the node gets the summed rate divided by the
// node's size. CPUs: HostShare::cpus(), the union of the node's ranks'
// affinity masks (mpirun binds each of a few ranks to its own core), capped
// by a quota.
NodePeak measure_node_gemm(MpiCommunicator& node, const HostShare& host, bool bf16);
}  // namespace st
