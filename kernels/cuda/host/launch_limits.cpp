// Launch geometry and shape limits of the CUDA kernels (see launch_limits.hpp).
#include "kernels/cuda/host/launch_limits.hpp"

#include <algorithm>
#include <climits>

namespace st::cuda_host {

size_t attn_tile_bytes(int64_t hd) {
  return size_t(kAttnTile) * size_t(hd / 2 + 1) * 4;  // bf16 pairs
}
size_t attn_rows_bytes(int64_t hd) { return size_t(kAttnRows) * size_t(hd) * sizeof(float); }

AttnLaunch attention_launch(int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv,
                            int64_t hd) {
  const int threads = kAttnWarps * 32;
  AttnLaunch l;
  l.fwd = {(Tq + kAttnRows - 1) / kAttnRows, B * Hq, threads,
           2 * attn_tile_bytes(hd) + attn_rows_bytes(hd)};
  l.bwd_dq = {(Tq + kAttnRows - 1) / kAttnRows, B * Hq, threads,
              2 * attn_tile_bytes(hd) + 2 * attn_rows_bytes(hd)};
  l.bwd_dkdv = {(Tk + kAttnRows - 1) / kAttnRows, B * Hkv, threads,
                2 * attn_tile_bytes(hd) + 2 * attn_rows_bytes(hd) + 3 * kAttnTile * sizeof(float)};
  return l;
}

std::string attention_limits(int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t hd,
                             size_t smem_optin) {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (Hkv <= 0 || Hq <= 0 || Hq % Hkv != 0)
    return "n_heads " + s(Hq) + " per rank is not a multiple of n_kv_heads " + s(Hkv);
  if (hd <= 0 || hd % 2 != 0 || hd > kMaxHeadDim)
    return "head_dim " + s(hd) + ": the attention kernels need an even head_dim of at most " +
           s(kMaxHeadDim);
  if (B * std::max(Hq, Hkv) > kMaxGridY)
    return "micro_batch x heads per rank = " + s(B) + " x " + s(std::max(Hq, Hkv)) + " = " +
           s(B * std::max(Hq, Hkv)) + " exceeds the attention grid's " + s(kMaxGridY);
  if (Tq >= INT_MAX || Tk >= INT_MAX)
    return "sequence of " + s(std::max(Tq, Tk)) + " tokens per rank exceeds the kernels' int range";
  const AttnLaunch l = attention_launch(B, Tq, Tk, Hq, Hkv, hd);
  const size_t most = std::max({l.fwd.smem, l.bwd_dq.smem, l.bwd_dkdv.smem});
  if (most > smem_optin)
    return "head_dim " + s(hd) + " needs " + std::to_string(most) +
           " bytes of shared memory per block, more than the GPU's " + std::to_string(smem_optin);
  return "";
}

unsigned elementwise_grid(int64_t n, int threads) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > 65535LL * 16) g = 65535LL * 16;
  return unsigned(g);
}
}  // namespace st::cuda_host
