// Launch geometry and shape limits of the CUDA backend's kernels, compiled
// without nvcc: the block-attention kernels (kernels/cuda/attention.cu) take
// their tile constants, grids and shared-memory sizes from here, and
// CudaBackend::supports() asks attention_limits() so a config the kernels
// cannot run is refused at start-up (exit 2, naming the keys) rather than
// thrown mid-step. Tested on CPUs (label cuda-host).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace st::cuda_host {

// The block-attention kernels: a block of kAttnWarps warps owns kAttnRows
// query (or key) rows of one (batch, head); K/V rows stream through shared
// memory in tiles of kAttnTile (one per lane). Each lane holds head
// dimensions lane, lane+32, ...: at most kMaxHeadDim.
constexpr int kAttnWarps = 4;
constexpr int kAttnRowsPerWarp = 2;
constexpr int kAttnRows = kAttnWarps * kAttnRowsPerWarp;
constexpr int kAttnTile = 32;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y
// The smallest opt-in dynamic shared memory per block of a GPU the backend
// runs (sm_86/sm_89: 99 KiB; sm_80 163 KiB, sm_90 227 KiB).
constexpr size_t kMinSmemOptin = size_t(99) << 10;

struct Grid {
  int64_t x = 0, y = 0;
  int threads = 0;
  size_t smem = 0;  // dynamic shared memory, bytes
};

struct AttnLaunch {
  Grid fwd, bwd_dq, bwd_dkdv;
};

// Shared-memory pieces: a tile of kAttnTile bf16 rows (padded to hd/2 + 1
// bf16 pairs per row), and kAttnRows fp32 rows.
size_t attn_tile_bytes(int64_t hd);
size_t attn_rows_bytes(int64_t hd);

// The grids of one block-attention call: queries [B,Tq,Hq,hd] against keys
// [B,Tk,Hkv,hd]. Assumes attention_limits() passed.
AttnLaunch attention_launch(int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd);

// "" or why the block kernels cannot run the shape on a GPU with
// `smem_optin` bytes of opt-in shared memory (head_dim odd or above
// kMaxHeadDim, B*heads beyond gridDim.y, a sequence beyond int, Hq not a
// multiple of Hkv, shared memory beyond the GPU's).
std::string attention_limits(int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd,
                             size_t smem_optin = kMinSmemOptin);

// Blocks of a grid-stride elementwise kernel over n items (common.cuh): one
// per `threads` items, at least 1, at most 65535 * 16 (the loop covers the
// rest).
unsigned elementwise_grid(int64_t n, int threads);
}  // namespace st::cuda_host
