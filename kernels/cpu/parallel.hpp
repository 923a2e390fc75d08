// Private to kernels/cpu: when a loop is worth an OpenMP team. Below this
// many scalar operations the fork/join costs more than it saves (tiny test
// shapes, decode-sized batches, oversubscribed CI ranks).
#pragma once
#include <cstdint>

namespace st::kernels {
constexpr int64_t kMinParallelWork = int64_t(1) << 15;
}  // namespace st::kernels
