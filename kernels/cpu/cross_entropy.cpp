// CPU softmax cross-entropy over a vocabulary shard (cpu_kernels.hpp): the
// three steps every backend runs (ops.hpp), so tp = 1 is the one-shard case
// of the vocab-parallel loss. Per row: max, sum of exp(x - max), the
// target's logit; then lse = max + log(sumexp). The backward may overwrite
// the logits in place (the logits are the largest activation of a step).
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"

namespace st::kernels {

ST_CPU_CLONES void ce_partial(const float* logits, const int32_t* targets, int64_t rows, int64_t V,
                              int64_t v0, float* max, float* sumexp, float* tlogit) {
#pragma omp parallel for schedule(static) if (rows * V > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * V;
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (int64_t j = 1; j < V; ++j) m = std::max(m, x[j]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += exp_fast(x[j] - m);
    max[r] = m;
    sumexp[r] = sum;
    const int64_t t = int64_t(targets[r]) - v0;
    tlogit[r] = (targets[r] >= 0 && t >= 0 && t < V) ? x[t] : 0.f;
  }
}

void ce_rescale(const float* max, const float* gmax, float* sumexp, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) sumexp[r] *= std::exp(max[r] - gmax[r]);
}

void ce_finish(const float* gmax, const float* sumexp, const float* tlogit, const int32_t* targets,
               int64_t rows, float* lse, float* row_loss) {
  for (int64_t r = 0; r < rows; ++r) {
    const float L = gmax[r] + std::log(sumexp[r]);
    lse[r] = L;
    row_loss[r] = targets[r] < 0 ? 0.f : L - tlogit[r];
  }
}

double loss_sum(const float* row_loss, const int32_t* targets, int64_t rows) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] >= 0) total += double(row_loss[r]);
  return total;
}

ST_CPU_CLONES void ce_bwd(const float* logits, const int32_t* targets, const float* lse,
                          int64_t rows, int64_t V, int64_t v0, float scale, float* dlogits) {
#pragma omp parallel for schedule(static) if (rows * V > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * V;
    float* dx = dlogits + r * V;
    if (targets[r] < 0) {
      std::fill(dx, dx + V, 0.f);
      continue;
    }
    const float L = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) dx[j] = exp_fast(x[j] - L) * scale;
    const int64_t t = int64_t(targets[r]) - v0;
    if (t >= 0 && t < V) dx[t] -= scale;
  }
}
}  // namespace st::kernels
