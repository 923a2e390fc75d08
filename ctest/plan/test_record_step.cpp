// One step of the trainer's own Engine on the recording backend
// (lib/record/step.hpp), held against the same Engine computing on the CPU
// device: the bytes by category after set-up and the step's peak are the
// bytes the CPU device hands out (exactly, MemStats), for every ZeRO stage,
// recompute mode and precision on one rank. On a pipeline x tp x dp layout
// each stage records its own part of the model and the collectives its
// groups carry.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/backend.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"
#include "parallel/mesh.hpp"
#include "record/record.hpp"
#include "record/step.hpp"

namespace {
using st::Config;
using st::MemCat;

Config tiny(const std::vector<std::string>& sets, int world) {
  std::vector<std::string> s = {"model.preset=tiny", "train.micro_batch=2", "train.grad_accum=2"};
  s.insert(s.end(), sets.begin(), sets.end());
  Config c = st::load_config("", s);
  st::resolve_layout(c, world);
  return c;
}

struct Measured {
  st::MemoryStats setup, step;
};

// The Engine on the default CPU device, one rank: its groups are all of one
// rank (no collective runs), so recording host groups stand in for MPI ones.
Measured cpu_step(const Config& cfg) {
  st::record::Recording unused;
  st::Mesh mesh(0, st::MeshDims{}, [&](const std::string& name, int r, int n) {
    return std::unique_ptr<st::HostGroup>(
        std::make_unique<st::record::RecordCommunicator>(unused, name, r, n));
  });
  st::Backend& be = st::cpu_backend();
  const st::MemoryStats before = be.device().memory();
  Measured m;
  {
    st::Engine engine(cfg, mesh, be);
    m.setup = be.device().memory();
    st::DataLoader loader(st::make_synthetic_source(1, cfg.model.vocab_size), cfg.model.seq_len,
                          cfg.train.micro_batch, cfg.train.grad_accum, 1, 0);
    engine.begin_step();
    const st::StepOut so = engine.forward_backward(1, loader);
    double exposed = 0;
    engine.apply(1, cfg.optim.lr, so.grad_norm, false, &exposed);
    m.step = be.device().memory();
  }
  // Bytes of this engine only (the process may hold others).
  for (size_t i = 0; i < st::kMemCats; ++i) {
    m.setup.current[i] -= before.current[i];
    m.step.current[i] -= before.current[i];
  }
  m.step.peak_total -= before.current_total;
  return m;
}
}  // namespace

TEST(RecordStep, SameBytesAsTheEngineOnTheCpuDevice) {
  for (const char* zero : {"0", "1", "2", "3"})
    for (const char* ck : {"none", "selective", "full"})
      for (const char* prec : {"fp32", "bf16"}) {
        SCOPED_TRACE(std::string("zero ") + zero + ", act_ckpt " + ck + ", " + prec);
        const Config cfg =
            tiny({std::string("parallel.zero_stage=") + zero, std::string("train.act_ckpt=") + ck,
                  std::string("train.precision=") + prec},
                 1);
        const Measured cpu = cpu_step(cfg);
        const st::record::RankStep rec = st::record::record_step(cfg, 0);
        for (MemCat c : {MemCat::Params, MemCat::Grads, MemCat::Optim, MemCat::Activations}) {
          EXPECT_EQ(rec.setup.cur(c), cpu.setup.cur(c)) << st::memcat_name(c) << " after set-up";
          EXPECT_EQ(rec.step.cur(c), cpu.step.cur(c)) << st::memcat_name(c) << " after the step";
        }
        EXPECT_EQ(rec.step.peak_total, cpu.step.peak_total);
        EXPECT_GT(rec.step.pk(MemCat::Activations), 0);
        EXPECT_TRUE(rec.collectives.empty());  // one rank: no collective
      }
}

TEST(RecordStep, EachPipelineStageRecordsItsPartAndItsGroups) {
  // 8 ranks: pp 2 x dp 2 x tp 2, ZeRO 1.
  const Config cfg = tiny({"parallel.pp=2", "parallel.tp=2", "parallel.zero_stage=1"}, 8);
  ASSERT_EQ(cfg.parallel.dp, 2);
  const st::MeshDims d{2, 2, 1, 2};
  std::map<std::string, int> ops0, ops1;
  const st::record::RankStep s0 = st::record::record_step(cfg, st::mesh_rank({0, 0, 0, 0}, d));
  const st::record::RankStep s1 = st::record::record_step(cfg, st::mesh_rank({1, 1, 0, 1}, d));
  EXPECT_EQ(s1.at.pp, 1);
  EXPECT_EQ(s1.at.dp, 1);
  for (const auto& k : s0.kernels) ops0[k.op] += 1;
  for (const auto& k : s1.kernels) ops1[k.op] += 1;
  // The embedding on the first stage, the head's cross-entropy on the last.
  EXPECT_EQ(ops0["embedding_fwd"], cfg.train.grad_accum);
  EXPECT_EQ(ops1.count("embedding_fwd"), 0u);
  EXPECT_EQ(ops0.count("ce_partial"), 0u);
  EXPECT_GE(ops1["ce_partial"], cfg.train.grad_accum);
  // Half the layers each: as many attention calls on both stages.
  EXPECT_EQ(ops0["attention_fwd"], ops1["attention_fwd"]);
  EXPECT_EQ(ops0["attention_fwd"], cfg.train.grad_accum * cfg.model.n_layers / 2);
  std::map<std::string, int> groups;
  for (const auto& c : s0.collectives) groups[c.group] += 1;
  EXPECT_GT(groups["tp"], 0);     // tensor-parallel reductions
  EXPECT_GT(groups["dp_cp"], 0);  // gradient buckets and the ZeRO-1 gather
  int p2p = 0;
  for (const auto& c : s0.collectives)
    if (c.kind == st::CollKind::SendRecv) {
      ++p2p;
      EXPECT_EQ(c.group.rfind("pp_", 0), 0u) << c.group;
    }
  EXPECT_EQ(p2p, 2 * cfg.train.grad_accum);  // each micro-batch: send forward, receive backward
  // ZeRO 1 over dp 2: the moments are half of the unsharded ones.
  const Config z0 = tiny({"parallel.pp=2", "parallel.tp=2", "parallel.zero_stage=0"}, 8);
  const st::record::RankStep r0 = st::record::record_step(z0, 0);
  EXPECT_NEAR(double(s0.setup.cur(MemCat::Optim)), r0.setup.cur(MemCat::Optim) / 2.0,
              0.02 * r0.setup.cur(MemCat::Optim));
}
