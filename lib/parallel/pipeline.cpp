// Implementation of pipeline.hpp (the interleaved order follows Megatron-LM's
// forward_backward_pipelining_with_interleaving).
#include "parallel/pipeline.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace st {

std::vector<PipeOp> pipeline_schedule(int pp, int chunks, int micro, int stage) {
  ST_CHECK(pp >= 1 && chunks >= 1 && micro >= 1 && stage >= 0 && stage < pp, "bad pipeline shape");
  std::vector<PipeOp> ops;
  if (chunks == 1) {
    const int warm = std::min(pp - stage - 1, micro);
    for (int m = 0; m < warm; ++m) ops.push_back({true, m, 0});
    for (int m = warm; m < micro; ++m) {
      ops.push_back({true, m, 0});
      ops.push_back({false, m - warm, 0});
    }
    for (int m = micro - warm; m < micro; ++m) ops.push_back({false, m, 0});
    return ops;
  }
  ST_CHECK(micro % pp == 0, "interleaved schedule needs grad_accum % pp == 0");
  const int total = micro * chunks;
  // Virtual step k -> (micro, chunk): groups of pp micro-batches per chunk.
  auto at = [&](int k, bool fwd) {
    const int group = k / (pp * chunks), in = k % (pp * chunks);
    int c = in / pp;
    if (!fwd) c = chunks - 1 - c;
    return PipeOp{fwd, group * pp + in % pp, c};
  };
  int warm = micro == pp ? total : std::min(total, (pp - stage - 1) * 2 + (chunks - 1) * pp);
  for (int k = 0; k < warm; ++k) ops.push_back(at(k, true));
  for (int k = 0; k < total - warm; ++k) {
    ops.push_back(at(warm + k, true));
    ops.push_back(at(k, false));
  }
  for (int k = total - warm; k < total; ++k) ops.push_back(at(k, false));
  return ops;
}
}  // namespace st
