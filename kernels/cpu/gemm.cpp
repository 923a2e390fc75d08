// CPU GEMM for kernels/ops.hpp: row-major sgemm through CBLAS (OpenBLAS),
// and the bf16 GEMM's choice between oneDNN (gemm_onednn.cpp) and widening
// the operands to fp32 for the sgemm (the fallback, here).
#include <cblas.h>

#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "tensor/dtype.hpp"

namespace st::kernels {
namespace {
int as_blas_int(int64_t v, const char* what) {
  ST_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "gemm ", what, "=", v,
           " does not fit a 32-bit BLAS integer");
  return int(v);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS would still scale C by beta; do the same explicitly
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, as_blas_int(M, "M"), as_blas_int(N, "N"),
              as_blas_int(K, "K"), alpha, A, as_blas_int(lda, "lda"), B, as_blas_int(ldb, "ldb"),
              beta, C, as_blas_int(ldc, "ldc"));
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C) {
  gemm(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

std::string gemm_library() {
  const char* corename = openblas_get_corename();
  const char* config = openblas_get_config();
  const std::string core = corename ? corename : "unknown";
  const int par = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
  std::string s = std::string(config ? config : "OpenBLAS") + " (core " + core + ", " +
                  (par == 2   ? "OpenMP threads"
                   : par == 1 ? "pthreads"
                              : "sequential") +
                  ")";
  std::string lower;
  for (char c : core) lower += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
#if defined(__x86_64__)
  const bool generic = lower == "prescott" || lower == "core2" || lower == "nehalem";
  if (generic && __builtin_cpu_supports("avx2")) {
    const bool avx512 = __builtin_cpu_supports("avx512f");
    // A fact, not a promise: whether another kernel is faster is for the
    // measured sgemm rate (the trainer's log) to say, and on one such VM
    // the step ran at the same speed with either.
    s += std::string(" -- generic kernel on an ") + (avx512 ? "AVX-512" : "AVX2") +
         " CPU (OPENBLAS_CORETYPE=" + (avx512 ? "SkylakeX" : "Haswell") +
         " selects the matching one)";
  }
#endif
  return s;
}

namespace {
// The stored extent of a rows x cols operand with row stride ld.
int64_t extent(int64_t rows, int64_t cols, int64_t ld) {
  return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}
void widen(const uint16_t* x, int64_t n, std::vector<float>& out) {
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = bf16_to_f32(x[i]);
}
}  // namespace

void gemm_bf16_widened(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                       void* C, int64_t ldc, bool c_bf16) {
  if (M == 0 || N == 0) return;
  std::vector<float> a, b, c;
  widen(A, extent(ta ? K : M, ta ? M : K, lda), a);
  widen(B, extent(tb ? N : K, tb ? K : N, ldb), b);
  if (!c_bf16) {
    gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, static_cast<float*>(C), ldc);
    return;
  }
  // Only the rows x N window of C is read and written: the bytes between
  // rows (ldc > N) may belong to someone else.
  uint16_t* h = static_cast<uint16_t*>(C);
  c.assign(size_t(M * N), 0.f);
  if (beta != 0.f)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[size_t(i * N + j)] = bf16_to_f32(h[i * ldc + j]);
  gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) h[i * ldc + j] = f32_to_bf16(c[size_t(i * N + j)]);
}

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, void* C, int64_t ldc,
               bool c_bf16) {
  if (gemm_bf16_native())
    gemm_bf16_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, c_bf16);
  else
    gemm_bf16_widened(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, c_bf16);
}
}  // namespace st::kernels
