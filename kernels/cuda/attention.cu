// The block form of grouped-query attention that ring attention (context
// parallelism) needs, for ops_cuda.hpp: queries [B,Tq] against one K/V block
// [B,Tk] with explicit token positions (query t sees key j iff kpos[j] <=
// qpos[t], kpos ascending), the log-sum-exp merge of partial results, and
// the backward of one block from the final out and lse. The same kernels
// serve plain causal attention where cuDNN cannot (positions 0..T-1).
//
// Layout of the work: a block of 4 warps owns 8 rows (2 per warp) of one
// (batch, head); K/V (or Q/dO) rows stream through shared memory in tiles of
// 32, lane j of a warp scoring tile row j, then every lane accumulates its
// head dimensions (lane, lane+32, ...) over the tile in row order. Math is
// fp32 (online softmax in the forward), outputs are rounded once.
// Deterministic without atomics on floats: the backward is two kernels,
// dq per query row (which also stores D = dout . out per row) and dk/dv per
// key row walking (query head of the group, query) in order, each row with
// one writer that adds its sum into the fp32 accumulator.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/host/launch_limits.hpp"
#include "kernels/cuda/ops_cuda.hpp"

namespace st::kernels::cuda {
using namespace detail;

namespace {
// Tile constants, grids and shared-memory sizes: kernels/cuda/host/launch_limits.hpp.
constexpr int kWarps = cuda_host::kAttnWarps;
constexpr int kRowsPerWarp = cuda_host::kAttnRowsPerWarp;
constexpr int kRows = cuda_host::kAttnRows;   // rows a block owns
constexpr int kTile = cuda_host::kAttnTile;   // rows per shared-memory tile (one per lane)
constexpr int kDims = int(kMaxHeadDim / 32);  // head dimensions per lane
constexpr unsigned kFull = 0xffffffffu;
using bf162 = __nv_bfloat162;

// Keys visible to a query at position qp: the first index with kpos > qp.
__device__ int visible(const int32_t* kpos, int Tk, int32_t qp) {
  int lo = 0, hi = Tk;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (kpos[mid] <= qp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// kTile token rows [first, first + kTile) of one head into shared memory as
// bf16 pairs with a row stride of hd/2 + 1 words (bank-conflict free when
// each lane reads its own row); rows past `valid` are zero.
__device__ void load_tile(bf162* dst, const bf16* src, int64_t row_stride, int first, int valid,
                          int hd) {
  const int half = hd / 2, stride = half + 1;
  for (int idx = threadIdx.x; idx < kTile * half; idx += blockDim.x) {
    const int r = idx / half, c = idx % half;
    bf162 x = __floats2bfloat162_rn(0.f, 0.f);
    if (r < valid) x = reinterpret_cast<const bf162*>(src + int64_t(first + r) * row_stride)[c];
    dst[r * stride + c] = x;
  }
}

// kRows rows of one head as fp32 (rows past `valid` are zero).
__device__ void load_rows(float* dst, const bf16* src, int64_t row_stride, int first, int valid,
                          int hd) {
  for (int idx = threadIdx.x; idx < kRows * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx % hd;
    dst[idx] = r < valid ? to_f(src[int64_t(first + r) * row_stride + d]) : 0.f;
  }
}

// a (fp32, shared, broadcast) . b (a padded bf16 tile row).
__device__ __forceinline__ float dot_row(const float* a, const bf162* b, int half) {
  float s = 0.f;
  for (int c = 0; c < half; ++c) {
    const float2 x = __bfloat1622float2(b[c]);
    s += a[2 * c] * x.x + a[2 * c + 1] * x.y;
  }
  return s;
}

// What a block of k_fwd / k_bwd_dq works on: batch b, query head h, query
// rows [t0, t0 + kRows); row strides of q-shaped (qs) and k-shaped (ks)
// tensors, the offset of (b, h) in q-shaped ones, and (b, its kv head) in k, v.
struct QueryRows {
  int b, h, t0;
  int64_t qs, ks, qoff;
  const bf16 *kb, *vb;
};
__device__ QueryRows query_rows(const bf16* k, const bf16* v, int Tq, int Tk, int Hq, int Hkv,
                                int hd) {
  QueryRows r;
  r.b = blockIdx.y / Hq;
  r.h = blockIdx.y % Hq;
  r.t0 = blockIdx.x * kRows;
  r.qs = int64_t(Hq) * hd;
  r.ks = int64_t(Hkv) * hd;
  r.qoff = int64_t(r.b) * Tq * r.qs + int64_t(r.h) * hd;
  const int64_t koff = int64_t(r.b) * Tk * r.ks + int64_t(r.h / (Hq / Hkv)) * hd;
  r.kb = k + koff;
  r.vb = v + koff;
  return r;
}

// n[i]: keys visible to this warp's row i; returns the block's maximum
// (*nmax is 0 and that is visible to every thread on entry).
__device__ int count_visible(int (&n)[kRowsPerWarp], const QueryRows& r, int Tq, int Tk,
                             const int32_t* qpos, const int32_t* kpos, int* nmax) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = r.t0 + warp * kRowsPerWarp + i;
    int nv = 0;
    if (lane == 0 && t < Tq) nv = visible(kpos, Tk, qpos[t]);
    n[i] = __shfl_sync(kFull, nv, 0);
    if (lane == 0) atomicMax(nmax, n[i]);  // integer: the order does not matter
  }
  __syncthreads();
  return *nmax;
}

// acc[dd] += sum over tile rows jj < cnt of w_jj * tile[jj][lane + 32 dd],
// w_jj being lane jj's w, rows in order (the tile is padded as load_tile's).
__device__ __forceinline__ void add_rows(float (&acc)[kDims], float w, const bf162* tile,
                                         int stride, int cnt, int hd) {
  const int lane = threadIdx.x & 31;
  for (int jj = 0; jj < cnt; ++jj) {
    const float wj = __shfl_sync(kFull, w, jj);
    if (wj == 0.f) continue;  // the same for every lane
    const bf16* row = reinterpret_cast<const bf16*>(tile + jj * stride);
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) {
      const int d = lane + 32 * dd;
      if (d < hd) acc[dd] += wj * to_f(row[d]);
    }
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    k_fwd(const bf16* q, const bf16* k, const bf16* v, int Tq, int Tk, int Hq, int Hkv, int hd,
          float scale, const int32_t* qpos, const int32_t* kpos, bf16* out, float* lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int half = hd / 2, stride = half + 1;
  bf162* Ks = reinterpret_cast<bf162*>(smem);
  bf162* Vs = Ks + kTile * stride;
  float* Qs = reinterpret_cast<float*>(Vs + kTile * stride);
  __shared__ int nmax;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const QueryRows R = query_rows(k, v, Tq, Tk, Hq, Hkv, hd);
  const int b = R.b, h = R.h, t0 = R.t0;
  if (threadIdx.x == 0) nmax = 0;
  load_rows(Qs, q + R.qoff, R.qs, t0, min(kRows, Tq - t0), hd);
  __syncthreads();
  int n[kRowsPerWarp];
  const int ntot = count_visible(n, R, Tq, Tk, qpos, kpos, &nmax);
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDims];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) acc[i][dd] = 0.f;
  }
  for (int j0 = 0; j0 < ntot; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile(Ks, R.kb, R.ks, j0, min(kTile, Tk - j0), hd);
    load_tile(Vs, R.vb, R.ks, j0, min(kTile, Tk - j0), hd);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (j0 >= n[i]) continue;  // warp-uniform
      const bool vis = j0 + lane < n[i];
      const float sc =
          scale * dot_row(Qs + (warp * kRowsPerWarp + i) * hd, Ks + lane * stride, half);
      const float s = vis ? sc : -INFINITY;
      const float mn = fmaxf(m[i], warp_max(s));  // finite: lane 0 sees a key
      const float p = vis ? expf(s - mn) : 0.f;
      const float corr = expf(m[i] - mn);
      l[i] = l[i] * corr + warp_sum(p);
#pragma unroll
      for (int dd = 0; dd < kDims; ++dd) acc[i][dd] *= corr;
      add_rows(acc[i], p, Vs, stride, min(kTile, n[i] - j0), hd);
      m[i] = mn;
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = t0 + warp * kRowsPerWarp + i;
    if (t >= Tq) continue;
    bf16* o = out + R.qoff + int64_t(t) * R.qs;
    const float inv = n[i] > 0 ? 1.f / l[i] : 0.f;
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) {
      const int d = lane + 32 * dd;
      if (d < hd) o[d] = to_bf(acc[i][dd] * inv);
    }
    if (lane == 0) lse[(int64_t(b) * Hq + h) * Tq + t] = n[i] > 0 ? m[i] + logf(l[i]) : -INFINITY;
  }
}

// One warp per (b, h, t) row.
__global__ void k_merge(bf16* out, float* lse, const bf16* out_b, const float* lse_b, int64_t rows,
                        int64_t T, int H, int hd) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);  // (b*H + h)*T + t
  if (row >= rows) return;
  const int64_t t = row % T, bh = row / T, h = bh % H, b = bh / H;
  const float L = lse[row], Lb = lse_b[row];
  if (Lb == -INFINITY) return;
  bf16* o = out + ((b * T + t) * H + h) * hd;
  const bf16* ob = out_b + ((b * T + t) * H + h) * hd;
  float Ln = Lb, wa = 0.f, wb = 1.f;
  if (L != -INFINITY) {
    const float M = fmaxf(L, Lb);
    Ln = M + logf(expf(L - M) + expf(Lb - M));
    wa = expf(L - Ln);
    wb = expf(Lb - Ln);
  }
  for (int d = lane; d < hd; d += 32)
    o[d] = L == -INFINITY ? ob[d] : to_bf(wa * to_f(o[d]) + wb * to_f(ob[d]));
  __syncwarp();  // every lane has read L
  if (lane == 0) lse[row] = Ln;
}

// dq += sum_j ds_j k_j per query row; stores D = dout . out per row in drow.
__global__ void __launch_bounds__(kWarps * 32)
    k_bwd_dq(const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
             const bf16* dout, int Tq, int Tk, int Hq, int Hkv, int hd, float scale,
             const int32_t* qpos, const int32_t* kpos, float* dq, float* drow) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int half = hd / 2, stride = half + 1;
  bf162* Ks = reinterpret_cast<bf162*>(smem);
  bf162* Vs = Ks + kTile * stride;
  float* Qs = reinterpret_cast<float*>(Vs + kTile * stride);
  float* Gs = Qs + kRows * hd;  // dout rows
  __shared__ int nmax;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const QueryRows R = query_rows(k, v, Tq, Tk, Hq, Hkv, hd);
  const int b = R.b, h = R.h, t0 = R.t0;
  const int64_t qs = R.qs, qoff = R.qoff;
  if (threadIdx.x == 0) nmax = 0;
  load_rows(Qs, q + qoff, qs, t0, min(kRows, Tq - t0), hd);
  load_rows(Gs, dout + qoff, qs, t0, min(kRows, Tq - t0), hd);
  __syncthreads();
  int n[kRowsPerWarp];
  const int ntot = count_visible(n, R, Tq, Tk, qpos, kpos, &nmax);
  float L[kRowsPerWarp], D[kRowsPerWarp], acc[kRowsPerWarp][kDims];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp * kRowsPerWarp + i, t = t0 + r;
    float part = 0.f;
    if (t < Tq)
      for (int d = lane; d < hd; d += 32) part += Gs[r * hd + d] * to_f(out[qoff + t * qs + d]);
    D[i] = warp_sum(part);
    const int64_t srow = (int64_t(b) * Hq + h) * Tq + t;
    L[i] = t < Tq ? lse[srow] : 0.f;
    if (lane == 0 && t < Tq) drow[srow] = D[i];
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) acc[i][dd] = 0.f;
  }
  for (int j0 = 0; j0 < ntot; j0 += kTile) {
    __syncthreads();
    load_tile(Ks, R.kb, R.ks, j0, min(kTile, Tk - j0), hd);
    load_tile(Vs, R.vb, R.ks, j0, min(kTile, Tk - j0), hd);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (j0 >= n[i]) continue;
      const int r = warp * kRowsPerWarp + i;
      const bool vis = j0 + lane < n[i];
      const float sc = scale * dot_row(Qs + r * hd, Ks + lane * stride, half);
      const float dp = dot_row(Gs + r * hd, Vs + lane * stride, half);
      const float p = vis ? expf(sc - L[i]) : 0.f;
      const float ds = vis ? p * (dp - D[i]) * scale : 0.f;
      add_rows(acc[i], ds, Ks, stride, min(kTile, n[i] - j0), hd);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = t0 + warp * kRowsPerWarp + i;
    if (t >= Tq || n[i] == 0) continue;
    float* g = dq + qoff + int64_t(t) * qs;
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) {
      const int d = lane + 32 * dd;
      if (d < hd) g[d] += acc[i][dd];
    }
  }
}

// dk += sum ds q, dv += sum p dout per key row, over the group's query heads
// and the queries in order.
__global__ void __launch_bounds__(kWarps * 32)
    k_bwd_dkdv(const bf16* q, const bf16* k, const bf16* v, const float* lse, const bf16* dout,
               int Tq, int Tk, int Hq, int Hkv, int hd, float scale, const int32_t* qpos,
               const int32_t* kpos, const float* drow, float* dk, float* dv) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int half = hd / 2, stride = half + 1;
  bf162* Qt = reinterpret_cast<bf162*>(smem);
  bf162* Gt = Qt + kTile * stride;  // dout tile
  float* Kr = reinterpret_cast<float*>(Gt + kTile * stride);
  float* Vr = Kr + kRows * hd;
  float* Lt = Vr + kRows * hd;
  float* Dt = Lt + kTile;
  int* Pt = reinterpret_cast<int*>(Dt + kTile);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int G = Hq / Hkv;
  const int b = blockIdx.y / Hkv, kh = blockIdx.y % Hkv;
  const int j0 = blockIdx.x * kRows;
  const int64_t qs = int64_t(Hq) * hd, ks = int64_t(Hkv) * hd;
  const int64_t koff = int64_t(b) * Tk * ks + int64_t(kh) * hd;
  load_rows(Kr, k + koff, ks, j0, min(kRows, Tk - j0), hd);
  load_rows(Vr, v + koff, ks, j0, min(kRows, Tk - j0), hd);
  const int kmin = kpos[j0];  // the block's first (smallest) key position
  int kp[kRowsPerWarp];
  float ak[kRowsPerWarp][kDims], av[kRowsPerWarp][kDims];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int j = j0 + warp * kRowsPerWarp + i;
    kp[i] = j < Tk ? kpos[j] : INT_MAX;
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) ak[i][dd] = av[i][dd] = 0.f;
  }
  for (int h = kh * G; h < (kh + 1) * G; ++h) {
    const int64_t qoff = int64_t(b) * Tq * qs + int64_t(h) * hd;
    for (int t0 = 0; t0 < Tq; t0 += kTile) {
      __syncthreads();  // the previous tile is consumed
      if (threadIdx.x < kTile) {
        const int t = t0 + threadIdx.x;
        const int64_t srow = (int64_t(b) * Hq + h) * Tq + t;
        Pt[threadIdx.x] = t < Tq ? qpos[t] : INT_MIN;
        Lt[threadIdx.x] = t < Tq ? lse[srow] : 0.f;
        Dt[threadIdx.x] = t < Tq ? drow[srow] : 0.f;
      }
      __syncthreads();
      int pmax = Pt[lane];
      for (int o = 16; o > 0; o >>= 1) pmax = max(pmax, __shfl_xor_sync(kFull, pmax, o));
      if (pmax < kmin) continue;  // no query of the tile sees a key of the block (block-uniform)
      load_tile(Qt, q + qoff, qs, t0, min(kTile, Tq - t0), hd);
      load_tile(Gt, dout + qoff, qs, t0, min(kTile, Tq - t0), hd);
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        const bool vis = t0 + lane < Tq && kp[i] <= Pt[lane];
        if (!__any_sync(kFull, vis)) continue;
        const float sc = scale * dot_row(Kr + r * hd, Qt + lane * stride, half);
        const float dp = dot_row(Vr + r * hd, Gt + lane * stride, half);
        const float p = vis ? expf(sc - Lt[lane]) : 0.f;
        const float ds = vis ? p * (dp - Dt[lane]) * scale : 0.f;
        add_rows(av[i], p, Gt, stride, kTile, hd);   // dv += p dout
        add_rows(ak[i], ds, Qt, stride, kTile, hd);  // dk += ds q
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int j = j0 + warp * kRowsPerWarp + i;
    if (j >= Tk) continue;
    float* gk = dk + koff + int64_t(j) * ks;
    float* gv = dv + koff + int64_t(j) * ks;
#pragma unroll
    for (int dd = 0; dd < kDims; ++dd) {
      const int d = lane + 32 * dd;
      if (d < hd) {
        gk[d] += ak[i][dd];
        gv[d] += av[i][dd];
      }
    }
  }
}

void check_shape(int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd) {
  // The GPU's own shared-memory limit is checked by cudaFuncSetAttribute.
  const std::string why = cuda_host::attention_limits(B, Tq, Tk, Hq, Hkv, hd, SIZE_MAX);
  ST_CHECK(why.empty(), "CUDA block attention B=", B, " Tq=", Tq, " Tk=", Tk, ": ", why);
}

// Dynamic shared memory beyond the default 48 KiB needs an opt-in per kernel.
template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > (size_t(48) << 10))
    ST_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}
static_assert(sizeof(bf162) == 4, "launch_limits.cpp sizes tiles in bf16 pairs of 4 bytes");
dim3 grid_of(const cuda_host::Grid& g) { return dim3(unsigned(g.x), unsigned(g.y)); }
}  // namespace

void attention_fwd_block(const bf16* q, const bf16* k, const bf16* v, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd, float scale,
                         const int32_t* qpos, const int32_t* kpos, bf16* out, float* lse,
                         cudaStream_t s) {
  check_shape(B, Tq, Tk, Hq, Hkv, hd);
  if (B == 0 || Tq == 0) return;
  const cuda_host::Grid g = cuda_host::attention_launch(B, Tq, Tk, Hq, Hkv, hd).fwd;
  allow_smem(k_fwd, g.smem);
  k_fwd<<<grid_of(g), g.threads, g.smem, s>>>(q, k, v, int(Tq), int(Tk), int(Hq), int(Hkv), int(hd),
                                              scale, qpos, kpos, out, lse);
  ST_CUDA_CHECK_LAUNCH();
}

void attention_lse_merge(bf16* out, float* lse, const bf16* out_b, const float* lse_b, int64_t B,
                         int64_t T, int64_t H, int64_t hd, cudaStream_t s) {
  const int64_t rows = B * H * T;
  if (rows == 0) return;
  k_merge<<<unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(out, lse, out_b, lse_b,
                                                                         rows, T, int(H), int(hd));
  ST_CUDA_CHECK_LAUNCH();
}

void attention_bwd_block(const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                         const float* lse, const bf16* dout, int64_t B, int64_t Tq, int64_t Tk,
                         int64_t Hq, int64_t Hkv, int64_t hd, float scale, const int32_t* qpos,
                         const int32_t* kpos, float* dq, float* dk, float* dv, float* drow,
                         cudaStream_t s) {
  check_shape(B, Tq, Tk, Hq, Hkv, hd);
  if (B == 0 || Tq == 0 || Tk == 0) return;
  const cuda_host::AttnLaunch l = cuda_host::attention_launch(B, Tq, Tk, Hq, Hkv, hd);
  allow_smem(k_bwd_dq, l.bwd_dq.smem);
  k_bwd_dq<<<grid_of(l.bwd_dq), l.bwd_dq.threads, l.bwd_dq.smem, s>>>(
      q, k, v, out, lse, dout, int(Tq), int(Tk), int(Hq), int(Hkv), int(hd), scale, qpos, kpos, dq,
      drow);
  ST_CUDA_CHECK_LAUNCH();
  allow_smem(k_bwd_dkdv, l.bwd_dkdv.smem);
  k_bwd_dkdv<<<grid_of(l.bwd_dkdv), l.bwd_dkdv.threads, l.bwd_dkdv.smem, s>>>(
      q, k, v, lse, dout, int(Tq), int(Tk), int(Hq), int(Hkv), int(hd), scale, qpos, kpos, drow, dk,
      dv);
  ST_CUDA_CHECK_LAUNCH();
}
}  // namespace st::kernels::cuda
