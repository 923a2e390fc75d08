// CPU softmax cross-entropy for kernels/ops.hpp: per-row log-sum-exp with
// max-subtraction, mean over non-ignored targets accumulated in double, and
// a backward that may overwrite the logits in place (the logits are the
// largest activation of a step).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/ops.hpp"

namespace st::kernels {

float cross_entropy_fwd(const float* logits, const int32_t* targets, int64_t rows, int64_t V,
                        float* lse, int64_t* n_valid) {
  for (int64_t r = 0; r < rows; ++r)
    ST_CHECK(targets[r] < V, "target ", targets[r], " at position ", r,
             " is outside the vocabulary [0, ", V, ")");
  std::vector<double> loss(size_t(rows), 0.0);
#pragma omp parallel for schedule(static) if (rows * V > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * V;
    float m = x[0];
    for (int64_t j = 1; j < V; ++j) m = std::max(m, x[j]);
    float sum = 0.f;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - m);
    lse[r] = m + std::log(sum);
    if (targets[r] >= 0) loss[size_t(r)] = double(lse[r]) - double(x[targets[r]]);
  }
  double total = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] >= 0) {
      total += loss[size_t(r)];
      ++n;
    }
  if (n_valid) *n_valid = n;
  return n ? float(total / double(n)) : 0.f;
}

void cross_entropy_bwd(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                       int64_t V, int64_t n_valid, float dloss, float* dlogits) {
  const float s = n_valid > 0 ? dloss / float(n_valid) : 0.f;
#pragma omp parallel for schedule(static) if (rows * V > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * V;
    float* dx = dlogits + r * V;
    if (targets[r] < 0) {
      std::fill(dx, dx + V, 0.f);
      continue;
    }
    const float L = lse[r];
    for (int64_t j = 0; j < V; ++j) dx[j] = std::exp(x[j] - L) * s;
    dx[targets[r]] -= s;
  }
}
}  // namespace st::kernels

// Vocab-parallel pieces: this rank holds logits for vocabulary [v0, v0+Vl).
namespace st::kernels {
void row_max(const float* x, int64_t rows, int64_t cols, float* out) {
#pragma omp parallel for schedule(static) if (rows * cols > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float m = xr[0];
    for (int64_t j = 1; j < cols; ++j) m = std::max(m, xr[j]);
    out[r] = m;
  }
}

void cross_entropy_shard_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t Vl,
                              int64_t v0, const float* row_max, double* sumexp,
                              double* target_logit) {
#pragma omp parallel for schedule(static) if (rows * Vl > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * Vl;
    const float m = row_max[r];
    float sum = 0.f;
    for (int64_t j = 0; j < Vl; ++j) sum += std::exp(x[j] - m);
    sumexp[r] = sum;
    const int64_t t = int64_t(targets[r]) - v0;
    target_logit[r] = (targets[r] >= 0 && t >= 0 && t < Vl) ? double(x[t]) : 0.0;
  }
}

void cross_entropy_bwd_shard(const float* logits, const int32_t* targets, const float* lse,
                             int64_t rows, int64_t Vl, int64_t v0, float scale, float* dlogits) {
#pragma omp parallel for schedule(static) if (rows * Vl > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * Vl;
    float* dx = dlogits + r * Vl;
    if (targets[r] < 0) {
      std::fill(dx, dx + Vl, 0.f);
      continue;
    }
    const float L = lse[r];
    for (int64_t j = 0; j < Vl; ++j) dx[j] = std::exp(x[j] - L) * scale;
    const int64_t t = int64_t(targets[r]) - v0;
    if (t >= 0 && t < Vl) dx[t] -= scale;
  }
}
}  // namespace st::kernels
