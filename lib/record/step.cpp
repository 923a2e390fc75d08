// record_step (step.hpp): the trainer's Engine built on a RecordBackend and
// a Mesh of recording groups, one step run.
#include "record/step.hpp"

#include <string>

#include "data/data.hpp"
#include "engine/engine.hpp"
#include "parallel/mesh.hpp"
#include "record/record_backend.hpp"

namespace st::record {
namespace {

// Constant tokens. The timeline's segments and their phase labels come
// from the engine's ranges (RecordRanges), not from the loads: the engine
// loads a micro-batch on its forward op only.
class ConstantSource final : public TokenSource {
 public:
  void sample(uint64_t, int seq_len, int32_t* out) const override {
    for (int i = 0; i <= seq_len; ++i) out[i] = 0;
  }
  std::string describe() const override { return "recording (constant tokens)"; }
};

}  // namespace

RankStep record_step(const Config& cfg, int rank) {
  const ParallelCfg& p = cfg.parallel;
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  RecordBackend be;
  Recording& rec = be.recording();
  rec.set_phase("set-up");
  // What the backend the record stands for allocates before any engine: the
  // CUDA backend's cuBLASLt workspace (backend.hpp), tracked like the rest.
  const size_t backend_ws = cfg.runtime.device == "cuda" ? kCudaGemmWorkspaceBytes : 0;
  void* ws = backend_ws ? be.device().allocate(backend_ws, MemCat::Workspace) : nullptr;
  Mesh mesh(rank, d, [&rec](const std::string& name, int r, int n) {
    return std::unique_ptr<HostGroup>(std::make_unique<RecordCommunicator>(rec, name, r, n));
  });
  Engine engine(cfg, mesh, be);
  RankStep out;
  out.rank = rank;
  out.at = mesh.coords();
  out.setup = rec.memory();
  DataLoader loader(std::make_unique<ConstantSource>(), cfg.model.seq_len, cfg.train.micro_batch,
                    cfg.train.grad_accum, p.dp, out.at.dp);
  rec.clear();
  engine.begin_step();
  const StepOut so = engine.forward_backward(1, loader);
  rec.set_phase("optimizer");
  double exposed = 0;
  engine.apply(1, cfg.optim.lr, so.grad_norm, false, &exposed);
  out.step = rec.memory();
  out.peak = rec.peak();
  rec.host_wait(rec.mark("compute"));  // the step's end
  out.segments = rec.segments();
  rec.take(out.kernels, out.collectives, out.copies, out.items, out.streams);
  if (ws) be.device().deallocate(ws, backend_ws, MemCat::Workspace);
  return out;
}

}  // namespace st::record
