// Implementation of memory.hpp: the recorded peak, by category.
#include "plan/memory.hpp"

#include "plan/recorded_step.hpp"

namespace st::plan {

namespace {
// The bytes by category at the step's peak. A pipeline stage keeps every
// boundary tensor it sends until the step's end (engine_pipeline.cpp), so
// with fewer micro-batches recorded than the step has, the sends of the
// others are added to the activations at the peak.
MemoryStats peak_bytes(const Config& cfg, const StageRecord& r) {
  MemoryStats at = r.step.peak.at;
  const int M = cfg.train.grad_accum;
  if (cfg.parallel.pp == 1 || r.micro >= M) return at;
  double sent = 0;
  for (const record::CollCall& c : r.step.collectives)
    if (c.kind == CollKind::SendRecv && !c.recv && c.axis.axis == Axis::Pp) sent += double(c.bytes);
  at.current[size_t(MemCat::Activations)] += int64_t(sent / r.micro * (M - r.micro));
  return at;
}
}  // namespace

MemoryEstimate estimate_memory(const Config& cfg, int stage) {
  const auto r = stage_record(cfg, stage);
  const record::PeakAt& pk = r->step.peak;
  const MemoryStats at = peak_bytes(cfg, *r);
  MemoryEstimate e;
  e.stage = stage;
  e.peak.weights = double(at.cur(MemCat::Params));
  e.peak.grads = double(at.cur(MemCat::Grads));
  e.peak.optim = double(at.cur(MemCat::Optim));
  e.peak.activations = double(at.cur(MemCat::Activations));
  e.peak.buffers = double(at.cur(MemCat::Comm));
  // The backend's own workspaces included (the CUDA backend's cuBLASLt
  // workspace: record_step allocates it as the backend does).
  e.peak.workspace = double(at.cur(MemCat::Workspace) + at.cur(MemCat::Other));
  e.activations_max = double(r->step.step.pk(MemCat::Activations));
  e.peak_at = pk.phase + ", after " + std::to_string(pk.kernel_index) + " kernels" +
              (pk.last_kernel.empty() ? "" : " (" + pk.last_kernel + ")");
  return e;
}

MemoryEstimate estimate_memory_worst(const Config& cfg) {
  MemoryEstimate worst;
  const int P = cfg.parallel.pp;
  for (int s = 0; s < P; ++s) {
    if (stand_in_stage(cfg, s) != s) continue;
    MemoryEstimate e = estimate_memory(cfg, s);
    if (s == 0 || e.peak.total() > worst.peak.total()) worst = std::move(e);
  }
  return worst;
}

}  // namespace st::plan
