// The row-major GEMM of kernels/ops.hpp as the column-major problem cuBLASLt
// is given (kernels/cuda/gemm_lt.cpp builds its descriptors from this),
// compiled without nvcc so the mapping is checked on CPUs against a
// reference GEMM with the same transposes and leading dimensions (label
// cuda-host).
//
// Row-major C[M,N] = op(A) op(B) is, read column-major, C^T[N,M] =
// op(B)^T op(A)^T: cuBLAS's first operand is our B, its second our A, and
// each row-major matrix with row stride ld is a column-major matrix of
// swapped shape with the same leading dimension.
#pragma once
#include <cstdint>
#include <string>

namespace st::cuda_host {

// A column-major matrix layout (cublasLtMatrixLayoutCreate's rows, cols, ld).
struct ColLayout {
  int64_t rows = 0, cols = 0, ld = 0;
};

struct LtGemm {
  bool trans_first = false, trans_second = false;  // CUBLASLT_MATMUL_DESC_TRANSA / TRANSB
  int64_t m = 0, n = 0, k = 0;                     // cuBLAS's C is m x n, op(first) m x k
  ColLayout first, second, c;                      // first = our B, second = our A, c = C (= D)
};

// The mapping; throws st::Error naming the argument when a stride is shorter
// than the row it strides over (cuBLASLt would refuse the layout, or read
// out of bounds).
LtGemm map_row_major_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                          int64_t ldb, int64_t ldc);

// The largest power of two <= 16 dividing both the address and the row
// stride in bytes (the alignment the heuristic is asked for).
int gemm_alignment(uintptr_t address, int64_t ld_elems, int elem_bytes);
}  // namespace st::cuda_host
