// ZeRO keeps what it promises, measured on CPU ranks (4 and 8, real MPI):
// the step engine on a small Llama (4 layers, d_model 128, 0.7M parameters,
// 0.25 MiB buckets: about a dozen buckets, so the partition, the staging pool
// and the per-bucket counts are exercised as on the default model, at a
// thirtieth of its compute) under ZeRO 0-3, fp32 and bf16, with two
// micro-batches; every rank checks the allocator's bytes by category
// against the formula of the partition it built (lib/parallel/grad_buckets.hpp):
//  - gradients: the full flat buffer under ZeRO 0/1; under ZeRO 2/3 the
//    shard at the end of the step, and during the step at most the shard
//    plus the staging pool (never the full gradient), or with
//    parallel.zero_full_grads the whole flat buffer besides the shard;
//  - ZeRO 3: 16 bytes per parameter of persistent state over the group
//    (fp32 master, gradient shard, two moments; no compute copy), padding
//    included;
//  - the communicator's counts: one reduce-scatter per bucket per
//    micro-batch (ZeRO 2/3) or one all-reduce per bucket per step (ZeRO 0/1),
//    and one all-gather per bucket after the update (ZeRO 1/2); the host
//    scalars (loss, norm) share the group and are counted apart.
// With SCALETRAIN_TEST_BACKEND=cuda (ctest test_zero_memory_cuda_np2, label
// gpu) the same engine runs on the CUDA backend and the counts come from its
// NCCL communicators (bf16 only, the counts only: the CUDA device's memory is
// not the partition's formula alone); it exits 77 on every rank where the
// backend cannot run (no library, no GPU, fewer GPUs than ranks on a node).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"

using namespace st;

namespace {

struct Case {
  int zero;
  std::string precision;
  bool full = false;  // parallel.zero_full_grads
};

bool on_cuda() {
  const char* b = std::getenv("SCALETRAIN_TEST_BACKEND");
  return b && std::string(b) == "cuda";
}

// The backend under test, preflighted once; exits 77 on every rank when it
// cannot run here.
Backend& test_backend() {
  static Backend* be = [] {
    if (!on_cuda()) return &cpu_backend(false);
    Config cfg;
    cfg.runtime.device = "cuda";
    cfg.train.precision = "bf16";
    std::string why;
    Backend* b = nullptr;
    try {
      b = &backend_for(cfg);
      MPI_Comm node;
      int local = 0, nlocal = 1;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local);
      MPI_Comm_size(node, &nlocal);
      MPI_Comm_free(&node);
      why = b->preflight(cfg, local, nlocal);
    } catch (const std::exception& e) {
      why = e.what();
    }
    int bad = why.empty() ? 0 : 1, any = 0, rank = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (any) {
      if (rank == 0) std::printf("skipped: backend 'cuda' cannot run here: %s\n", why.c_str());
      MPI_Finalize();
      std::exit(77);
    }
    return b;
  }();
  return *be;
}

class ZeroMemory : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroMemory, BytesByCategoryFollowThePartition) {
  const Case c = GetParam();
  const bool nccl = on_cuda();
  if (nccl && c.precision != "bf16") GTEST_SKIP() << "the CUDA backend trains in bf16 only";
  MpiCommunicator world(MPI_COMM_WORLD, "world", 120);
  const int n = world.size();
  Config cfg;
  cfg.model.n_layers = 4;
  cfg.model.d_model = 128;
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.model.ffn_hidden = 288;
  cfg.model.seq_len = 32;
  cfg.parallel.dp_bucket_mb = 0.25;
  cfg.parallel.dp = n;
  cfg.parallel.zero_stage = c.zero;
  cfg.train.precision = c.precision;
  cfg.train.micro_batch = 1;
  cfg.train.grad_accum = 2;
  cfg.parallel.zero_full_grads = c.full;
  if (nccl) cfg.runtime.device = "cuda";
  Backend& be = test_backend();
  Mesh mesh(world, MeshDims{1, n, 1, 1});
  Engine eng(cfg, mesh, be);
  DataLoader loader(make_synthetic_source(cfg.train.seed, cfg.model.vocab_size), cfg.model.seq_len,
                    cfg.train.micro_batch, cfg.train.grad_accum, n, mesh.coords().dp);
  Device& dev = be.device();
  const GradBuckets& bk = eng.buckets();
  int64_t flat = 0;
  for (int b = 0; b < bk.num_buckets(); ++b) flat += bk.bucket_len(b);
  const int64_t shard = bk.shard_numel(), pool = int64_t(bk.staging()) * bk.max_padded();
  const double P = double(eng.num_params());
  ASSERT_GE(bk.num_buckets(), 8) << "the test needs several buckets per rank";
  Communicator* dpcp = &be.communicator(mesh.dpcp());  // the gradient group
  const std::string what = "zero " + std::to_string(c.zero) + " " + c.precision +
                           (c.full ? " full grads" : "") + " rank " + std::to_string(world.rank()) +
                           " of " + std::to_string(n);

  for (long step = 1; step <= 2; ++step) {
    dev.synchronize();
    eng.begin_step();
    for (Communicator* k : eng.comms()) k->reset_stats();
    const StepOut o = eng.forward_backward(step, loader);
    ASSERT_TRUE(o.finite) << what;
    eng.apply(step, 1e-3, o.grad_norm, false, nullptr);
    dev.synchronize();
    const MemoryStats m = dev.memory();
    const int nb = bk.num_buckets();
    // On the CUDA device only the counts are checked (see the file comment).
    auto mem_eq = [&](int64_t got, int64_t want) {
      if (!nccl) {
        EXPECT_EQ(got, want) << what;
      }
    };
    if (c.zero <= 1) {
      mem_eq(m.cur(MemCat::Grads), 4 * flat);
      mem_eq(m.pk(MemCat::Grads), 4 * flat);
      // Plus the host scalars on the same group: the loss, and under ZeRO 1
      // the shard's sums of squares.
      EXPECT_EQ(dpcp->stats(CollKind::AllReduce).calls, nb + 1 + c.zero) << what;
      EXPECT_EQ(dpcp->stats(CollKind::ReduceScatter).calls, 0) << what;
    } else if (c.full) {
      // The whole flat buffer during the step, reduce-scattered once.
      mem_eq(m.cur(MemCat::Grads), 4 * shard);
      if (!nccl) {
        EXPECT_GE(m.pk(MemCat::Grads), 4 * (shard + flat)) << what;
      }
      EXPECT_EQ(dpcp->stats(CollKind::ReduceScatter).calls, nb) << what;
    } else {
      mem_eq(m.cur(MemCat::Grads), 4 * shard);
      if (!nccl) {
        EXPECT_GT(m.pk(MemCat::Grads), 4 * shard) << what << ": no staging used";
        EXPECT_LE(m.pk(MemCat::Grads), 4 * (shard + pool)) << what;
      }
      EXPECT_LT(pool, flat) << what << ": the pool is as big as the gradients";
      EXPECT_EQ(dpcp->stats(CollKind::ReduceScatter).calls, 2 * nb) << what;
      // Only the host scalars (the loss, the sums of squares): no gradient.
      EXPECT_EQ(dpcp->stats(CollKind::AllReduce).calls, 2) << what;
      EXPECT_LE(dpcp->stats(CollKind::AllReduce).bytes, 64) << what;
    }
    if (c.zero == 1 || c.zero == 2) {
      EXPECT_EQ(dpcp->stats(CollKind::AllGather).calls, nb) << what;
    }
    if (c.zero == 3 && !nccl) {
      // Persistent: master shard, gradient shard, two moments (16 bytes per
      // parameter over the group, padding aside); the norm's two doubles.
      // Per rank at most a 1/n share plus padding; summed over the group
      // every parameter once (the last rank's shards hold the padding, so
      // its own share of real parameters is smaller).
      EXPECT_EQ(m.cur(MemCat::Params), 4 * shard) << what;
      const double persistent =
          double(m.cur(MemCat::Params) + m.cur(MemCat::Grads) + m.cur(MemCat::Optim) - 16);
      EXPECT_LE(persistent, 16 * P / n * 1.05) << what;
      double group = 0;
      MPI_Allreduce(&persistent, &group, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_LE(group, 16 * P * 1.05) << what;
      EXPECT_GE(group, 16 * P * 0.98) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroMemory,
                         ::testing::Values(Case{0, "fp32"}, Case{1, "fp32"}, Case{2, "fp32"},
                                           Case{3, "fp32"}, Case{0, "bf16"}, Case{1, "bf16"},
                                           Case{2, "bf16"}, Case{3, "bf16"}, Case{2, "fp32", true},
                                           Case{3, "bf16", true}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.zero) + "_" +
                                  info.param.precision + (info.param.full ? "_full" : "");
                         });
}  // namespace
