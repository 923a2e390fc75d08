// The CPU's measured single-precision GEMM rate: the "peak" that MFU on CPU
// ranks is reported against (there is no datasheet figure for a shared VM).
#pragma once
namespace st {
// FLOP/s of cblas_sgemm at n x n x n with the current OpenMP/BLAS threads,
// best of a few repetitions lasting about `seconds` in all.
double measure_sgemm_flops(int n, double seconds);
}  // namespace st
