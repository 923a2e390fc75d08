// Row-major GEMM -> cuBLASLt's column-major descriptors (see gemm_map.hpp).
#include "kernels/cuda/host/gemm_map.hpp"

#include "core/error.hpp"

namespace st::cuda_host {

LtGemm map_row_major_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                          int64_t ldb, int64_t ldc) {
  ST_CHECK(M >= 0 && N >= 0 && K >= 0, "GEMM with M=", M, " N=", N, " K=", K);
  // Row-major A is [M,K] (trans_a: stored [K,M]); B is [K,N] (trans_b: [N,K]).
  const int64_t a_row = ta ? M : K, b_row = tb ? K : N;
  ST_CHECK(lda >= a_row && lda >= 1, "GEMM lda=", lda, " is shorter than a row of A (", a_row,
           " elements, trans_a=", ta, ")");
  ST_CHECK(ldb >= b_row && ldb >= 1, "GEMM ldb=", ldb, " is shorter than a row of B (", b_row,
           " elements, trans_b=", tb, ")");
  ST_CHECK(ldc >= N && ldc >= 1, "GEMM ldc=", ldc, " is shorter than a row of C (", N,
           " elements)");
  LtGemm g;
  g.trans_first = tb;
  g.trans_second = ta;
  g.m = N;
  g.n = M;
  g.k = K;
  // Stored row-major [r, c] with stride ld is column-major [c, r] with ld.
  g.first = {b_row, tb ? N : K, ldb};
  g.second = {a_row, ta ? K : M, lda};
  g.c = {N, M, ldc};
  return g;
}

int gemm_alignment(uintptr_t address, int64_t ld_elems, int elem_bytes) {
  const uintptr_t a = address | uintptr_t(ld_elems * elem_bytes);
  int al = 16;
  while (al > 1 && (a % uintptr_t(al)) != 0) al /= 2;
  return al;
}
}  // namespace st::cuda_host
