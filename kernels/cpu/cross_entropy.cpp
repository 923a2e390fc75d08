// CPU softmax cross-entropy over a vocabulary shard (cpu_kernels.hpp): the
// three steps every backend runs (ops.hpp), so tp = 1 is the one-shard case
// of the vocab-parallel loss. Per row: max, sum of exp(x - max), the
// target's logit; then lse = max + log(sumexp). The backward may overwrite
// the logits in place (the logits are the largest activation of a step).
// The logits are read (and dlogits written) in their stored type, fp32 or
// bf16, converted in registers: the largest tensor of a step is never
// widened into a copy.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd.hpp"

namespace st::kernels {

namespace {
template <typename T>
ST_CPU_CLONES void ce_partial_t(const T* logits, const int32_t* targets, int64_t rows, int64_t V,
                                int64_t v0, float* max, float* sumexp, float* tlogit) {
#pragma omp parallel for schedule(static) if (rows * V > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * V;
    float m = to_f32(x[0]);
#pragma omp simd reduction(max : m)
    for (int64_t j = 1; j < V; ++j) m = std::max(m, to_f32(x[j]));
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += exp_fast(to_f32(x[j]) - m);
    max[r] = m;
    sumexp[r] = sum;
    const int64_t t = int64_t(targets[r]) - v0;
    tlogit[r] = (targets[r] >= 0 && t >= 0 && t < V) ? to_f32(x[t]) : 0.f;
  }
}

template <typename T>
ST_CPU_CLONES void ce_bwd_t(const T* logits, const int32_t* targets, const float* lse, int64_t rows,
                            int64_t V, int64_t v0, float scale, T* dlogits) {
#pragma omp parallel for schedule(static) if (rows * V > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * V;
    T* dx = dlogits + r * V;
    if (targets[r] < 0) {
      std::fill(dx, dx + V, T(0));
      continue;
    }
    const float L = lse[r];
    const int64_t t = int64_t(targets[r]) - v0;
    // The target's term in fp32 before the one rounding of the store; bf16
    // goes through an fp32 chunk (simd.hpp).
    for (int64_t j0 = 0; j0 < V; j0 += kChunk) {
      const int64_t m = std::min(kChunk, V - j0), tj = t - j0;
      float buf[kChunk];
      const float* xf = buf;
      if constexpr (std::is_same_v<T, float>)
        xf = x + j0;
      else
        widen_chunk(x + j0, m, buf);
      float* df = std::is_same_v<T, float> ? reinterpret_cast<float*>(dx + j0) : buf;
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) df[j] = exp_fast(xf[j] - L) * scale - (j == tj ? scale : 0.f);
      if constexpr (!std::is_same_v<T, float>) narrow_chunk(buf, m, dx + j0);
    }
  }
}
}  // namespace

void ce_partial(const float* logits, const int32_t* targets, int64_t rows, int64_t V, int64_t v0,
                float* max, float* sumexp, float* tlogit) {
  ce_partial_t(logits, targets, rows, V, v0, max, sumexp, tlogit);
}
void ce_partial(const uint16_t* logits, const int32_t* targets, int64_t rows, int64_t V, int64_t v0,
                float* max, float* sumexp, float* tlogit) {
  ce_partial_t(logits, targets, rows, V, v0, max, sumexp, tlogit);
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

void ce_bwd(const float* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t V,
            int64_t v0, float scale, float* dlogits) {
  ce_bwd_t(logits, targets, lse, rows, V, v0, scale, dlogits);
}
void ce_bwd(const uint16_t* logits, const int32_t* targets, const float* lse, int64_t rows,
            int64_t V, int64_t v0, float scale, uint16_t* dlogits) {
  ce_bwd_t(logits, targets, lse, rows, V, v0, scale, dlogits);
}
}  // namespace st::kernels
