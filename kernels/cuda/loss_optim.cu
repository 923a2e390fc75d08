// CUDA vocab-parallel softmax cross-entropy (the three steps of
// kernels/ops.hpp, tp = 1 being the one-shard case), the device-side loss
// sum, the multi-tensor sum of squares for gradient norms and the
// multi-tensor AdamW of ops.hpp's one formula, for ops_cuda.hpp. One block
// per row for the loss (row max, then the sum of exp(x - max), as the CPU
// kernel), double accumulators in fixed trees for the loss and the norms,
// and Apex-style tensor lists passed by value for the optimizer and the
// norms, so a step over hundreds of tensors is a handful of launches.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/stochastic_round.hpp"

namespace st::kernels::cuda {
using namespace detail;

namespace {
constexpr int kRowThreads = 512;

__global__ void k_ce_partial(const bf16* logits, const int32_t* targets, int64_t V, int64_t v0,
                             float* mx, float* sumexp, float* tlogit) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const bf16* x = logits + r * V;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, to_f(x[j]));
  // max is exact in any order; broadcast through the block sum's shared slots
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < int(blockDim.x + 31) / 32; ++w) m = fmaxf(m, sh[w]);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(to_f(x[j]) - m);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    const int64_t t = int64_t(targets[r]) - v0;
    mx[r] = m;
    sumexp[r] = s;
    tlogit[r] = (targets[r] >= 0 && t >= 0 && t < V) ? to_f(x[t]) : 0.f;
  }
}

__global__ void k_ce_rescale(const float* mx, const float* gmax, float* sumexp, int64_t rows) {
  ST_GRID_STRIDE(r, rows) sumexp[r] *= expf(mx[r] - gmax[r]);
}

__global__ void k_ce_finish(const float* gmax, const float* sumexp, const float* tl,
                            const int32_t* targets, int64_t rows, float* lse, float* row_loss) {
  ST_GRID_STRIDE(r, rows) {
    const float L = gmax[r] + logf(sumexp[r]);
    lse[r] = L;
    row_loss[r] = targets[r] < 0 ? 0.f : L - tl[r];
  }
}

// acc[0] += scale * (sum of row_loss over rows with a target), in double.
__global__ void k_loss_accumulate(const float* row_loss, const int32_t* targets, int64_t rows,
                                  double scale, double* acc) {
  __shared__ double sh[1024];
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    if (targets[r] >= 0) s += double(row_loss[r]);
  s = block_sum_tree(s, sh);
  if (threadIdx.x == 0) acc[0] += scale * s;
}

// In place is allowed: each element is read before it is written.
__global__ void k_ce_bwd(const bf16* logits, const int32_t* targets, const float* lse, int64_t V,
                         int64_t v0, float scale, bf16* dlogits) {
  const int64_t r = blockIdx.x;
  const int32_t t = targets[r];
  const float L = lse[r];
  const bf16* x = logits + r * V;
  bf16* dx = dlogits + r * V;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float g = 0.f;
    if (t >= 0) {
      g = expf(to_f(x[j]) - L) * scale;
      if (j + v0 == int64_t(t)) g -= scale;
    }
    dx[j] = to_bf(g);
  }
}

// ---- multi-tensor lists ----
constexpr int kListTensors = 24;
constexpr int kListBlocks = 256;
constexpr int64_t kChunk = 65536;
constexpr int kListThreads = 512;
constexpr int kMaxGroups = 8;

struct SumsqList {
  const float* p[kListTensors];
  int64_t n[kListTensors];
  unsigned char block_tensor[kListBlocks];
  int block_chunk[kListBlocks];
  int block_slot[kListBlocks];  // where the block's partial goes
};
struct GroupRanges {
  int64_t off[kMaxGroups + 1];
};

struct AdamList {
  void* w[kListTensors];
  const float* g[kListTensors];
  void* m[kListTensors];
  void* v[kListTensors];
  void* wc[kListTensors];
  int64_t n[kListTensors];
  int64_t rng_pos[kListTensors];
  float wd[kListTensors];
  uint32_t rng_key[kListTensors];
  unsigned char wc_type[kListTensors];  // 0 none, 1 bf16, 2 fp32
  unsigned char bf16_state[kListTensors];
  unsigned char block_tensor[kListBlocks];
  int block_chunk[kListBlocks];
};
static_assert(sizeof(AdamList) <= 4096, "AdamList must fit the kernel parameter space");
struct AdamArgs {
  float lr, b1, b2, eps, bc1, bc2, grad_scale;
  uint32_t rng_seed;
};

__global__ void k_sumsq(SumsqList L, double* partials) {
  __shared__ double sh[kListThreads];
  const int ti = L.block_tensor[blockIdx.x];
  const int64_t c0 = int64_t(L.block_chunk[blockIdx.x]) * kChunk;
  const int64_t c1 = min(L.n[ti], c0 + kChunk);
  const float* x = L.p[ti];
  double acc = 0;
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) acc += double(x[i]) * double(x[i]);
  acc = block_sum_tree(acc, sh);
  if (threadIdx.x == 0) partials[L.block_slot[blockIdx.x]] = acc;
}

// out[g] = the partials of group g (a contiguous range), summed in a fixed tree.
__global__ void k_sumsq_groups(const double* partials, GroupRanges R, double* out) {
  __shared__ double sh[1024];
  const int g = blockIdx.x;
  double acc = 0;
  for (int64_t i = R.off[g] + threadIdx.x; i < R.off[g + 1]; i += blockDim.x) acc += partials[i];
  acc = block_sum_tree(acc, sh);
  if (threadIdx.x == 0) out[g] = acc;
}

// fp32 state: w, m, v fp32, the compute copy refreshed when there is one.
__device__ void adamw_f32(const AdamList& L, const AdamArgs& a, int ti, int64_t c0, int64_t c1) {
  float *w = static_cast<float*>(L.w[ti]), *m = static_cast<float*>(L.m[ti]);
  float* v = static_cast<float*>(L.v[ti]);
  const float* g = L.g[ti];
  const float wd = L.wd[ti];
  const int wt = L.wc_type[ti];
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
    const float gi = g[i] * a.grad_scale;
    const float mi = a.b1 * m[i] + (1.f - a.b1) * gi;
    const float vi = a.b2 * v[i] + (1.f - a.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wi = w[i] - a.lr * (wd * w[i] + (mi / a.bc1) / (sqrtf(vi / a.bc2) + a.eps));
    w[i] = wi;
    if (wt == 1) static_cast<bf16*>(L.wc[ti])[i] = to_bf(wi);
    if (wt == 2) static_cast<float*>(L.wc[ti])[i] = wi;
  }
}

// bf16 state (its own compute copy): the CPU twin's arithmetic, each value
// stored with stochastic rounding from the same random stream.
__device__ void adamw_bf16(const AdamList& L, const AdamArgs& a, int ti, int64_t c0, int64_t c1) {
  uint16_t* w = static_cast<uint16_t*>(L.w[ti]);
  uint16_t* m = static_cast<uint16_t*>(L.m[ti]);
  uint16_t* v = static_cast<uint16_t*>(L.v[ti]);
  const float* g = L.g[ti];
  const float wd = L.wd[ti];
  const uint32_t s = sround::stream(a.rng_seed, L.rng_key[ti]);
  const int64_t pos0 = L.rng_pos[ti];
  auto widen = [](uint16_t h) { return __uint_as_float(uint32_t(h) << 16); };
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
    const uint32_t r = sround::bits(s, uint64_t(pos0 + i)), r2 = sround::bits2(r);
    const float gi = g[i] * a.grad_scale;
    const float mi = a.b1 * widen(m[i]) + (1.f - a.b1) * gi;
    const float vi = a.b2 * widen(v[i]) + (1.f - a.b2) * gi * gi;
    const float wi = widen(w[i]);
    m[i] = sround::to_bf16(mi, r);
    v[i] = sround::to_bf16(vi, r >> 16);
    w[i] = sround::to_bf16(wi - a.lr * (wd * wi + (mi / a.bc1) / (sqrtf(vi / a.bc2) + a.eps)), r2);
  }
}

__global__ void k_adamw(AdamList L, AdamArgs a) {
  const int ti = L.block_tensor[blockIdx.x];
  const int64_t c0 = int64_t(L.block_chunk[blockIdx.x]) * kChunk;
  const int64_t c1 = min(L.n[ti], c0 + kChunk);
  if (L.bf16_state[ti])
    adamw_bf16(L, a, ti, c0, c1);
  else
    adamw_f32(L, a, ti, c0, c1);
}

// Walks tensors x chunks of kChunk elements: fill(slot, t) puts tensor t in a
// list slot, block(b, t, c) is told that block b of the list is chunk c of
// tensor t, and launch(blocks) runs a full (or the last) list.
template <typename List, typename Fill, typename Block, typename Launch>
void for_lists(List& L, const std::vector<int64_t>& sizes, Fill fill, Block block, Launch launch) {
  int nt = 0, nb = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    if (sizes[t] <= 0) continue;
    fill(nt, t);
    const int64_t chunks = (sizes[t] + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      L.block_tensor[nb] = static_cast<unsigned char>(nt);
      L.block_chunk[nb] = int(c);
      block(nb, t, c);
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

int64_t chunks_of(int64_t n) { return n > 0 ? (n + kChunk - 1) / kChunk : 0; }
}  // namespace

void ce_partial(const bf16* logits, const int32_t* targets, int64_t rows, int64_t V, int64_t v0,
                float* max, float* sumexp, float* tlogit, cudaStream_t s) {
  if (rows <= 0) return;
  ST_CHECK(V > 0, "ce_partial over an empty vocabulary shard");
  k_ce_partial<<<unsigned(rows), kRowThreads, 0, s>>>(logits, targets, V, v0, max, sumexp, tlogit);
  ST_CUDA_CHECK_LAUNCH();
}
void ce_rescale(const float* max, const float* gmax, float* sumexp, int64_t rows, cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_rescale<<<grid_for(rows), kThreads, 0, s>>>(max, gmax, sumexp, rows);
  ST_CUDA_CHECK_LAUNCH();
}
void ce_finish(const float* gmax, const float* sumexp, const float* tlogit, const int32_t* targets,
               int64_t rows, float* lse, float* row_loss, cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_finish<<<grid_for(rows), kThreads, 0, s>>>(gmax, sumexp, tlogit, targets, rows, lse,
                                                  row_loss);
  ST_CUDA_CHECK_LAUNCH();
}
void loss_accumulate(const float* row_loss, const int32_t* targets, int64_t rows, double scale,
                     double* acc, cudaStream_t s) {
  if (rows <= 0) return;
  k_loss_accumulate<<<1, 1024, 0, s>>>(row_loss, targets, rows, scale, acc);
  ST_CUDA_CHECK_LAUNCH();
}
void ce_bwd(const bf16* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t V,
            int64_t v0, float scale, bf16* dlogits, cudaStream_t s) {
  if (rows <= 0) return;
  k_ce_bwd<<<unsigned(rows), kRowThreads, 0, s>>>(logits, targets, lse, V, v0, scale, dlogits);
  ST_CUDA_CHECK_LAUNCH();
}

int64_t sumsq_scratch(const std::vector<F32Span>& spans) {
  int64_t n = 0;
  for (const F32Span& sp : spans) n += chunks_of(sp.n);
  return n;
}

void sumsq(const std::vector<F32Span>& spans, int groups, double* out, double* scratch,
           cudaStream_t s) {
  ST_CHECK(groups >= 1 && groups <= kMaxGroups, "sumsq: ", groups, " groups (at most ", kMaxGroups,
           ")");
  GroupRanges R{};
  std::vector<int64_t> sizes;
  for (const F32Span& sp : spans) {
    ST_CHECK(sp.group >= 0 && sp.group < groups, "sumsq: group ", sp.group, " of ", groups);
    R.off[sp.group + 1] += chunks_of(sp.n);
    sizes.push_back(sp.n);
  }
  for (int g = 0; g < groups; ++g) R.off[g + 1] += R.off[g];
  std::vector<int64_t> next(R.off, R.off + groups);  // next free slot per group
  SumsqList L{};
  for_lists(
      L, sizes, [&](int slot, size_t t) { L.p[slot] = spans[t].p, L.n[slot] = spans[t].n; },
      [&](int b, size_t t, int64_t) { L.block_slot[b] = int(next[size_t(spans[t].group)]++); },
      [&](int nb) {
        k_sumsq<<<unsigned(nb), kListThreads, 0, s>>>(L, scratch);
        ST_CUDA_CHECK_LAUNCH();
      });
  k_sumsq_groups<<<unsigned(groups), 1024, 0, s>>>(scratch, R, out);
  ST_CUDA_CHECK_LAUNCH();
}

void adamw(const std::vector<AdamWSpan>& spans, const AdamWHyper& h, cudaStream_t s) {
  ST_CHECK(h.step >= 1, "adamw step counts from 1, got ", h.step);
  // Bias corrections exactly as the CPU kernel computes them.
  AdamArgs a{h.lr,
             h.beta1,
             h.beta2,
             h.eps,
             1.f - float(std::pow(double(h.beta1), double(h.step))),
             1.f - float(std::pow(double(h.beta2), double(h.step))),
             h.grad_scale,
             h.rng_seed};
  std::vector<int64_t> sizes;
  for (const AdamWSpan& sp : spans) {
    ST_CHECK(sp.wc == nullptr || sp.wc_t == DType::BF16 || sp.wc_t == DType::F32,
             "adamw: compute copy of dtype ", dtype_name(sp.wc_t));
    ST_CHECK(sp.state_t == DType::F32 || (sp.state_t == DType::BF16 && sp.wc == nullptr),
             "adamw: state of dtype ", dtype_name(sp.state_t), sp.wc ? " with a compute copy" : "");
    sizes.push_back(sp.n);
  }
  AdamList L{};
  for_lists(
      L, sizes,
      [&](int slot, size_t t) {
        const AdamWSpan& sp = spans[t];
        L.w[slot] = sp.w, L.g[slot] = sp.g, L.m[slot] = sp.m, L.v[slot] = sp.v;
        L.wc[slot] = sp.wc, L.n[slot] = sp.n, L.wd[slot] = sp.decay ? h.weight_decay : 0.f;
        L.wc_type[slot] = sp.wc == nullptr ? 0 : (sp.wc_t == DType::BF16 ? 1 : 2);
        L.bf16_state[slot] = sp.state_t == DType::BF16 ? 1 : 0;
        L.rng_key[slot] = sp.rng_key, L.rng_pos[slot] = sp.rng_pos;
      },
      [](int, size_t, int64_t) {},
      [&](int nb) {
        k_adamw<<<unsigned(nb), kListThreads, 0, s>>>(L, a);
        ST_CUDA_CHECK_LAUNCH();
      });
}
}  // namespace st::kernels::cuda
