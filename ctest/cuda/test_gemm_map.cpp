// The row-major -> cuBLASLt column-major GEMM mapping (label cuda-host): the
// descriptors kernels/cuda/gemm_lt.cpp hands cuBLASLt, executed by a
// column-major BLAS (OpenBLAS's cblas_sgemm, CblasColMajor: the BLAS
// definition cuBLASLt follows for the same transposes and leading
// dimensions), must give the row-major product kernels/ops.hpp defines,
// computed here by a plain triple loop. Every transpose pair, padded
// leading dimensions, beta accumulation, and the layouts' consistency with
// (m, n, k) that cuBLASLt checks.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "kernels/cuda/host/gemm_algo.hpp"
#include "kernels/cuda/host/gemm_map.hpp"

namespace {
using st::cuda_host::map_row_major_gemm;

// kernels/ops.hpp: C[M,N] = alpha op(A) op(B) + beta C, row-major, ld = row stride.
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t p = 0; p < K; ++p)
        s += double(ta ? A[p * lda + i] : A[i * lda + p]) * (tb ? B[j * ldb + p] : B[p * ldb + j]);
      C[i * ldc + j] = float(alpha * s + beta * C[i * ldc + j]);
    }
}

struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;
};

TEST(GemmMap, ColumnMajorExecutionOfTheDescriptorsGivesTheRowMajorProduct) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int checked = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Case& c : {Case{ta, tb, 5, 7, 3, 0}, Case{ta, tb, 16, 9, 33, 3},
                            Case{ta, tb, 1, 12, 8, 5}, Case{ta, tb, 13, 1, 4, 1}})
        for (float beta : {0.f, 1.f}) {
          const int64_t lda = (ta ? c.M : c.K) + c.pad, ldb = (tb ? c.K : c.N) + c.pad + 1,
                        ldc = c.N + c.pad + 2;
          std::vector<float> A(size_t((ta ? c.K : c.M) * lda)), B(size_t((tb ? c.N : c.K) * ldb)),
              C0(size_t(c.M * ldc));
          for (auto* v : {&A, &B, &C0})
            for (auto& x : *v) x = u(rng);
          std::vector<float> want = C0, got = C0;
          ref_gemm(ta, tb, c.M, c.N, c.K, 0.5f, A.data(), lda, B.data(), ldb, beta, want.data(),
                   ldc);
          const auto g = map_row_major_gemm(ta, tb, c.M, c.N, c.K, lda, ldb, ldc);
          // What cuBLASLt checks: op(first) is m x k, op(second) k x n, C m x n.
          EXPECT_EQ(g.trans_first ? g.first.cols : g.first.rows, g.m);
          EXPECT_EQ(g.trans_first ? g.first.rows : g.first.cols, g.k);
          EXPECT_EQ(g.trans_second ? g.second.cols : g.second.rows, g.k);
          EXPECT_EQ(g.trans_second ? g.second.rows : g.second.cols, g.n);
          EXPECT_EQ(g.c.rows, g.m);
          EXPECT_EQ(g.c.cols, g.n);
          for (const auto& l : {g.first, g.second, g.c}) EXPECT_GE(l.ld, l.rows);
          cblas_sgemm(CblasColMajor, g.trans_first ? CblasTrans : CblasNoTrans,
                      g.trans_second ? CblasTrans : CblasNoTrans, int(g.m), int(g.n), int(g.k),
                      0.5f, B.data(), int(g.first.ld), A.data(), int(g.second.ld), beta, got.data(),
                      int(g.c.ld));
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const float w = want[size_t(i * ldc + j)], h = got[size_t(i * ldc + j)];
              if (j >= c.N) {
                ASSERT_EQ(h, C0[size_t(i * ldc + j)]) << "padding written";
              } else {
                ASSERT_NEAR(h, w, 1e-5f * (1 + std::fabs(w)))
                    << "ta=" << ta << " tb=" << tb << " M=" << c.M << " N=" << c.N << " K=" << c.K
                    << " at " << i << "," << j;
              }
            }
          ++checked;
        }
  EXPECT_EQ(checked, 32);
}

TEST(GemmMap, RefusesStridesShorterThanARow) {
  EXPECT_THROW(map_row_major_gemm(false, false, 4, 8, 6, 5, 8, 8), st::Error);  // lda < K
  EXPECT_THROW(map_row_major_gemm(true, false, 4, 8, 6, 3, 8, 8), st::Error);   // lda < M
  EXPECT_THROW(map_row_major_gemm(false, true, 4, 8, 6, 6, 5, 8), st::Error);   // ldb < K
  EXPECT_THROW(map_row_major_gemm(false, false, 4, 8, 6, 6, 8, 7), st::Error);  // ldc < N
  try {
    map_row_major_gemm(false, false, 4, 8, 6, 6, 7, 8);
    FAIL();
  } catch (const st::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ldb=7 is shorter than a row of B (8 elements"),
              std::string::npos)
        << e.what();
  }
}

TEST(GemmMap, AlignmentIsTheLargestPowerOfTwoDividingAddressAndStride) {
  using st::cuda_host::gemm_alignment;
  EXPECT_EQ(gemm_alignment(0x1000, 64, 2), 16);  // 128-byte rows
  EXPECT_EQ(gemm_alignment(0x1008, 64, 2), 8);   // address 8-aligned
  EXPECT_EQ(gemm_alignment(0x1000, 7, 2), 2);    // 14-byte rows
  EXPECT_EQ(gemm_alignment(0x1000, 3, 4), 4);    // fp32, 12-byte rows
  EXPECT_EQ(gemm_alignment(0x1001, 64, 2), 1);
}
// The heuristic's candidates in order: the first usable one runs; one that
// cuBLASLt refuses at run time hands over to the next; none left is an
// error naming each candidate's reason.
TEST(GemmAlgo, FirstUsableCandidateThenTheNextOnFailure) {
  using st::cuda_host::gemm_algo_refusals;
  using st::cuda_host::GemmCandidate;
  using st::cuda_host::pick_gemm_algo;
  const size_t ws = 1 << 20;
  std::vector<GemmCandidate> c = {
      {false, 0, false}, {true, 2 << 20, false}, {true, 4096, false}, {true, 0, false}};
  EXPECT_EQ(pick_gemm_algo(c, ws), 2);  // 0 unsupported, 1 needs more workspace
  c[2].failed = true;
  EXPECT_EQ(pick_gemm_algo(c, ws), 3);
  EXPECT_EQ(pick_gemm_algo(c, 4 << 20), 1);  // with a larger workspace, 1 is usable
  c[3].failed = true;
  EXPECT_EQ(pick_gemm_algo(c, ws), -1);
  const std::string why = gemm_algo_refusals(c, ws);
  EXPECT_NE(why.find("cublaslt_h0: not supported"), std::string::npos) << why;
  EXPECT_NE(why.find("cublaslt_h1: needs 2097152 bytes of workspace, have 1048576"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("cublaslt_h3: refused at run time"), std::string::npos) << why;
  EXPECT_EQ(pick_gemm_algo({}, ws), -1);
  EXPECT_EQ(gemm_algo_refusals({}, ws), "no heuristic result");
  EXPECT_EQ(st::cuda_host::gemm_path_name(0), "cublaslt_h0");
}
}  // namespace
