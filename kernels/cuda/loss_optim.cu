// CUDA softmax cross-entropy (plain and vocab-parallel) and the multi-tensor
// AdamW with a device-side clip coefficient, for ops_cuda.hpp. One block per
// row for the loss (online max/sum-exp, merged in a fixed order), and
// Apex-style tensor lists passed by value for the optimizer, so a step over
// hundreds of parameter tensors is a handful of launches.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.hpp"

namespace st::kernels::cuda {
using namespace detail;

namespace {
constexpr int kRowThreads = 512;

__device__ MaxSum row_maxsum(const bf16* x, int64_t V) {
  MaxSum v{-INFINITY, 0.f};
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float xj = to_f(x[j]);
    if (xj > v.m) {
      v.s = (v.m == -INFINITY ? 0.f : v.s * __expf(v.m - xj)) + 1.f;
      v.m = xj;
    } else {
      v.s += __expf(xj - v.m);
    }
  }
  __shared__ MaxSum sh[32];
  return block_maxsum(v, sh);
}

__global__ void k_ce_fwd(const bf16* logits, const int32_t* targets, int64_t V, float* lse,
                         float* row_loss) {
  const int64_t r = blockIdx.x;
  const bf16* x = logits + r * V;
  const MaxSum ms = row_maxsum(x, V);
  if (threadIdx.x == 0) {
    const float L = ms.m + logf(ms.s);
    const int32_t t = targets[r];
    lse[r] = L;
    row_loss[r] = t < 0 ? 0.f : (t < V ? L - to_f(x[t]) : NAN);
  }
}

__global__ void k_ce_vp_partial(const bf16* logits, const int32_t* targets, int64_t V, int64_t v0,
                                float* mx, float* sumexp, float* target_logit) {
  const int64_t r = blockIdx.x;
  const bf16* x = logits + r * V;
  const MaxSum ms = row_maxsum(x, V);
  if (threadIdx.x == 0) {
    const int64_t t = int64_t(targets[r]) - v0;
    mx[r] = ms.m;
    sumexp[r] = ms.s;
    target_logit[r] = (targets[r] >= 0 && t >= 0 && t < V) ? to_f(x[t]) : 0.f;
  }
}

__global__ void k_ce_vp_rescale(const float* mx, const float* gmax, float* sumexp, int64_t rows) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r < rows) sumexp[r] *= expf(mx[r] - gmax[r]);
}

__global__ void k_ce_vp_finish(const float* gmax, const float* sumexp, const float* tl,
                               const int32_t* targets, int64_t rows, float* lse, float* row_loss) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const float L = gmax[r] + logf(sumexp[r]);
  lse[r] = L;
  row_loss[r] = targets[r] < 0 ? 0.f : L - tl[r];
}

__global__ void k_ce_bwd(const bf16* logits, const int32_t* targets, const float* lse, int64_t V,
                         int64_t v0, float s, bf16* dlogits) {
  const int64_t r = blockIdx.x;
  const int32_t t = targets[r];
  const float L = lse[r];
  const bf16* x = logits + r * V;
  bf16* dx = dlogits + r * V;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float g = 0.f;
    if (t >= 0) {
      g = __expf(to_f(x[j]) - L) * s;
      if (j + v0 == int64_t(t)) g -= s;
    }
    dx[j] = to_bf(g);
  }
}

// Fixed-order sum of row_loss and count of valid targets, in double.
__global__ void k_loss_sum(const float* row_loss, const int32_t* targets, int64_t rows,
                           double* out) {
  __shared__ double sh[1024];
  __shared__ long long shn[1024];
  double acc = 0;
  long long n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    if (targets[r] >= 0) {
      acc += row_loss[r];
      ++n;
    }
  sh[threadIdx.x] = acc;
  shn[threadIdx.x] = n;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      sh[threadIdx.x] += sh[threadIdx.x + w];
      shn[threadIdx.x] += shn[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = sh[0];
    out[1] = double(shn[0]);
  }
}

// ---- multi-tensor lists ----
constexpr int kListTensors = 24;
constexpr int kListBlocks = 256;
constexpr int64_t kChunk = 65536;
constexpr int kListThreads = 512;

struct AdamList {
  float* w[kListTensors];
  const float* g[kListTensors];
  float* m[kListTensors];
  float* v[kListTensors];
  bf16* wb[kListTensors];
  int64_t n[kListTensors];
  float wd[kListTensors];
  unsigned char block_tensor[kListBlocks];
  int block_chunk[kListBlocks];
};

struct SumsqList {
  const float* g[kListTensors];
  int64_t n[kListTensors];
  unsigned char block_tensor[kListBlocks];
  int block_chunk[kListBlocks];
  int64_t partial_base;
};

__global__ void k_sumsq(SumsqList L, float* partials) {
  __shared__ float sh[32];
  const int ti = L.block_tensor[blockIdx.x];
  const int64_t c0 = int64_t(L.block_chunk[blockIdx.x]) * kChunk;
  const int64_t c1 = min(L.n[ti], c0 + kChunk);
  float acc = 0.f;
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) acc += L.g[ti][i] * L.g[ti][i];
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) partials[L.partial_base + blockIdx.x] = acc;
}

__global__ void k_sum_partials(const float* partials, int64_t n, float* out) {
  __shared__ double sh[1024];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = float(sh[0]);
}

__global__ void k_adamw(AdamList L, float lr, float b1, float b2, float eps, float bc1, float bc2,
                        const float* sumsq, float max_norm) {
  float coef = 1.f;
  if (sumsq != nullptr && max_norm > 0.f) {
    const float norm = sqrtf(*sumsq);
    if (isfinite(norm) && norm > max_norm) coef = max_norm / (norm + 1e-6f);
  }
  const int ti = L.block_tensor[blockIdx.x];
  const int64_t c0 = int64_t(L.block_chunk[blockIdx.x]) * kChunk;
  const int64_t c1 = min(L.n[ti], c0 + kChunk);
  float *w = L.w[ti], *m = L.m[ti], *v = L.v[ti];
  const float* g = L.g[ti];
  bf16* wb = L.wb[ti];
  const float wd = L.wd[ti];
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
    const float gi = g[i] * coef;
    const float mi = b1 * m[i] + (1.f - b1) * gi;
    const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wi = w[i] - lr * (wd * w[i] + (mi / bc1) / (sqrtf(vi / bc2) + eps));
    w[i] = wi;
    if (wb) wb[i] = to_bf(wi);
  }
}

// Walks tensors x chunks, calling launch(list_fill_count) whenever the list
// is full; fill(slot, tensor) copies a tensor's pointers into the list.
template <typename List, typename Fill, typename Launch>
void for_lists(List& L, const std::vector<int64_t>& sizes, Fill fill, Launch launch) {
  int nt = 0, nb = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    if (sizes[t] <= 0) continue;
    fill(nt, t);
    const int64_t chunks = (sizes[t] + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      L.block_tensor[nb] = static_cast<unsigned char>(nt);
      L.block_chunk[nb] = int(c);
      ++nb;
      const bool last_chunk = c + 1 == chunks;
      if (nb == kListBlocks || (last_chunk && nt + 1 == kListTensors)) {
        launch(nb);
        nb = 0;
        if (!last_chunk) {
          fill(0, t);  // the tensor continues in the next list
          nt = 0;
        } else {
          nt = -1;
        }
      }
    }
    ++nt;
  }
  if (nb > 0) launch(nb);
}
}  // namespace

void cross_entropy_fwd(const bf16* logits, const int32_t* targets, int64_t rows, int64_t V,
                       float* lse, float* row_loss, cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_fwd<<<unsigned(rows), kRowThreads, 0, s>>>(logits, targets, V, lse, row_loss);
  ST_CUDA_CHECK_LAUNCH();
}

float cross_entropy_loss(const float* row_loss, const int32_t* targets, int64_t rows,
                         int64_t* n_valid, cudaStream_t s) {
  double* d = nullptr;
  ST_CUDA_CHECK(cudaMallocAsync(&d, 2 * sizeof(double), s));
  k_loss_sum<<<1, 1024, 0, s>>>(row_loss, targets, rows, d);
  ST_CUDA_CHECK_LAUNCH();
  double h[2] = {0, 0};
  ST_CUDA_CHECK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
  ST_CUDA_CHECK(cudaFreeAsync(d, s));
  ST_CUDA_CHECK(cudaStreamSynchronize(s));
  const int64_t n = int64_t(h[1]);
  if (n_valid) *n_valid = n;
  return n ? float(h[0] / double(n)) : 0.f;
}

void cross_entropy_bwd(const bf16* logits, const int32_t* targets, const float* lse, int64_t rows,
                       int64_t V, int64_t v0, int64_t n_valid, float dloss, bf16* dlogits,
                       cudaStream_t s) {
  if (rows <= 0) return;
  const float sc = n_valid > 0 ? dloss / float(n_valid) : 0.f;
  k_ce_bwd<<<unsigned(rows), kRowThreads, 0, s>>>(logits, targets, lse, V, v0, sc, dlogits);
  ST_CUDA_CHECK_LAUNCH();
}

void cross_entropy_vp_partial(const bf16* logits, const int32_t* targets, int64_t rows, int64_t V,
                              int64_t v0, float* max, float* sumexp, float* target_logit,
                              cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_vp_partial<<<unsigned(rows), kRowThreads, 0, s>>>(logits, targets, V, v0, max, sumexp,
                                                         target_logit);
  ST_CUDA_CHECK_LAUNCH();
}
void cross_entropy_vp_rescale(const float* max, const float* gmax, float* sumexp, int64_t rows,
                              cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_vp_rescale<<<grid_for(rows), kThreads, 0, s>>>(max, gmax, sumexp, rows);
  ST_CUDA_CHECK_LAUNCH();
}
void cross_entropy_vp_finish(const float* gmax, const float* sumexp, const float* target_logit,
                             const int32_t* targets, int64_t rows, float* lse, float* row_loss,
                             cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_vp_finish<<<grid_for(rows), kThreads, 0, s>>>(gmax, sumexp, target_logit, targets, rows, lse,
                                                     row_loss);
  ST_CUDA_CHECK_LAUNCH();
}

void multi_tensor_sumsq(const std::vector<const float*>& grads, const std::vector<int64_t>& sizes,
                        float* sumsq, cudaStream_t s) {
  ST_CHECK(grads.size() == sizes.size(), "multi_tensor_sumsq: ", grads.size(), " pointers for ",
           sizes.size(), " sizes");
  int64_t total_blocks = 0;
  for (auto n : sizes) total_blocks += n > 0 ? (n + kChunk - 1) / kChunk : 0;
  if (total_blocks == 0) {
    ST_CUDA_CHECK(cudaMemsetAsync(sumsq, 0, sizeof(float), s));
    return;
  }
  float* partials = nullptr;
  ST_CUDA_CHECK(cudaMallocAsync(&partials, size_t(total_blocks) * sizeof(float), s));
  SumsqList L{};
  L.partial_base = 0;
  for_lists(
      L, sizes, [&](int slot, size_t t) { L.g[slot] = grads[t], L.n[slot] = sizes[t]; },
      [&](int nb) {
        k_sumsq<<<unsigned(nb), kListThreads, 0, s>>>(L, partials);
        ST_CUDA_CHECK_LAUNCH();
        L.partial_base += nb;
      });
  k_sum_partials<<<1, 1024, 0, s>>>(partials, total_blocks, sumsq);
  ST_CUDA_CHECK_LAUNCH();
  ST_CUDA_CHECK(cudaFreeAsync(partials, s));
}

void adamw_multi(const std::vector<AdamWTensor>& tensors, float lr, float beta1, float beta2,
                 float eps, int64_t step, const float* grad_sumsq, float max_norm, cudaStream_t s) {
  ST_CHECK(step >= 1, "adamw step counts from 1, got ", step);
  // Bias corrections exactly as the CPU twin computes them.
  const float bc1 = 1.f - float(std::pow(double(beta1), double(step)));
  const float bc2 = 1.f - float(std::pow(double(beta2), double(step)));
  std::vector<int64_t> sizes;
  for (auto& t : tensors) sizes.push_back(t.n);
  AdamList L{};
  for_lists(
      L, sizes,
      [&](int slot, size_t t) {
        const AdamWTensor& a = tensors[t];
        L.w[slot] = a.w, L.g[slot] = a.g, L.m[slot] = a.m, L.v[slot] = a.v, L.wb[slot] = a.w_bf16;
        L.n[slot] = a.n, L.wd[slot] = a.weight_decay;
      },
      [&](int nb) {
        k_adamw<<<unsigned(nb), kListThreads, 0, s>>>(L, lr, beta1, beta2, eps, bc1, bc2,
                                                      grad_sumsq, max_norm);
        ST_CUDA_CHECK_LAUNCH();
      });
}
}  // namespace st::kernels::cuda
