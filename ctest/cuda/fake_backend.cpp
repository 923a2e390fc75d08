// A backend library for test_backend_loader (not a backend): it exports the
// table lib/backend's loader reads, either with a seam hash from another
// tree (FAKE_STALE) or with this build's hash and a create() that refuses
// with a reason (FAKE_REFUSE), so the loader's refusals run on real dlopen'd
// libraries on a CPU.
#include <cstdio>

#include "backend/backend.hpp"
#include "scaletrain/seam_hash.hpp"

namespace {
void* refuse(char* why, size_t n) {
  std::snprintf(why, n, "no GPU in this test library");
  return nullptr;
}
#ifdef FAKE_STALE
const ScaletrainBackendTable kTable = {sizeof(ScaletrainBackendTable), "0123456789abcdef", "cuda",
                                       &refuse};
#else
const ScaletrainBackendTable kTable = {sizeof(ScaletrainBackendTable), SCALETRAIN_SEAM_HASH, "cuda",
                                       &refuse};
#endif
}  // namespace

extern "C" __attribute__((visibility("default"))) const ScaletrainBackendTable*
scaletrain_backend_table(void) {
  return &kTable;
}
