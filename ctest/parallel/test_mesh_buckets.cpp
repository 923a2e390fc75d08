// Mesh and gradient buckets under real MPI (2 and 4 ranks): coordinates with
// tp innermost, group membership, pipeline layer ranges, bucketed all-reduce
// with gradients arriving out of order, and the ZeRO partition (every element
// owned by exactly one rank, cuts on row boundaries, one part size per bucket
// on every rank, one reduce-scatter and one all-gather per bucket as the
// communicator counts them, reduce-scatter sums, all-gather restores in place
// and from a shard), and staged reductions (gradients written into staging
// buffers, every micro-batch reduce-scattered into the shard, never more
// staging alive than the pool holds).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/mesh.hpp"
#include "parallel/zero_sync.hpp"
#include "parallel/stages.hpp"

using namespace st;

namespace {
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

TEST(Mesh, CoordinatesRoundTripTpInnermost) {
  MeshDims d{2, 3, 2, 2};
  for (int r = 0; r < d.world(); ++r) EXPECT_EQ(mesh_rank(mesh_coords(r, d), d), r);
  EXPECT_EQ(mesh_coords(1, d).tp, 1);  // neighbours differ in tp first
  EXPECT_EQ(mesh_coords(2, d).cp, 1);
  EXPECT_EQ(mesh_coords(4, d).dp, 1);
  EXPECT_EQ(mesh_coords(12, d).pp, 1);
}

TEST(Mesh, LayerRanges) {
  using V = std::vector<std::pair<int, int>>;
  EXPECT_EQ(stage_layers(8, 2, 1, 1), (V{{4, 8}}));
  EXPECT_EQ(stage_layers(8, 2, 2, 0), (V{{0, 2}, {4, 6}}));
  EXPECT_EQ(stage_layers(8, 2, 2, 1), (V{{2, 4}, {6, 8}}));
}

TEST(Mesh, UnevenLayerRanges) {
  using V = std::vector<std::pair<int, int>>;
  EXPECT_EQ(stage_layers(std::vector<int>{3, 1}, 2, 0), (V{{0, 3}}));
  EXPECT_EQ(stage_layers(std::vector<int>{3, 1}, 2, 1), (V{{3, 4}}));
  // Interleaved: chunk c of stage s is entry c*pp + s.
  EXPECT_EQ(stage_layers(std::vector<int>{2, 1, 1, 1}, 2, 0), (V{{0, 2}, {3, 4}}));
  EXPECT_EQ(stage_layers(std::vector<int>{2, 1, 1, 1}, 2, 1), (V{{2, 3}, {4, 5}}));
  // torchtitan's split of Llama 3.1 405B (126 layers) over pp 8.
  Config c;
  c.model.n_layers = 126;
  c.parallel.pp = 8;
  c.parallel.pipeline_layers = "15,16*6,15";
  EXPECT_EQ(stage_layers(c, 0), (V{{0, 15}}));
  EXPECT_EQ(stage_layers(c, 1), (V{{15, 31}}));
  EXPECT_EQ(stage_layers(c, 7), (V{{111, 126}}));
  EXPECT_THROW(stage_layers(std::vector<int>{3, 0}, 2, 0), Error);     // a chunk with no layers
  EXPECT_THROW(stage_layers(std::vector<int>{1, 1, 1}, 2, 0), Error);  // not pp * chunks
}

TEST(Mesh, GroupsHoldTheRightRanks) {
  const int n = world_size();
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  MeshDims d = n == 4 ? MeshDims{1, 2, 1, 2} : MeshDims{1, 1, 1, 2};
  Mesh m(world, d);
  EXPECT_EQ(m.tp().size(), d.tp);
  EXPECT_EQ(m.dp().size(), d.dp);
  EXPECT_EQ(m.dpcp().size(), d.dp * d.cp);
  // Sum of world ranks over my tp group: the tp group is consecutive ranks.
  double s = world.rank();
  m.tp().all_reduce_sum(&s, 1);
  const int first = world.rank() - m.coords().tp;
  EXPECT_EQ(s, first * d.tp + d.tp * (d.tp - 1) / 2);
}

// A flat gradient buffer (one segment per entry of `sizes`) with each
// parameter on a 64-element boundary, as the model lays them out; element j
// of parameter i on rank r is (r + 1) * (i + 1) + j (small integers: exact
// in bf16 too), the padding NaN (a reduction must not care).
struct Flat {
  std::vector<FlatParam> params;
  std::vector<int64_t> seg_len;
  std::vector<std::vector<float>> segs;
};
Flat make_flat(const std::vector<std::vector<int64_t>>& sizes, const std::vector<int64_t>& rows,
               int rank) {
  Flat f;
  size_t i = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    int64_t off = 0;
    for (int64_t n : sizes[s]) {
      f.params.push_back({int(s), off, n, rows.empty() ? 1 : rows[i], int(i / 2)});
      off += (n + 63) / 64 * 64;
      ++i;
    }
    f.seg_len.push_back(off);
    f.segs.emplace_back(size_t(off), std::nanf(""));
  }
  for (size_t k = 0; k < f.params.size(); ++k) {
    const FlatParam& p = f.params[k];
    for (int64_t j = 0; j < p.n; ++j)
      f.segs[size_t(p.seg)][size_t(p.off + j)] = float((rank + 1) * (k + 1) + j % 97);
  }
  return f;
}
float summed(int n, size_t i, int64_t j) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += float((r + 1) * (i + 1) + j % 97);
  return s;
}

// Every test runs on the default CPU device and on the strict one (the
// collectives then run on the communicator's own worker stream).
class GradBucketsTest : public ::testing::TestWithParam<bool> {
 protected:
  Backend& be() { return cpu_backend(GetParam()); }
};

TEST_P(GradBucketsTest, AllReduceInPlaceOutOfOrderReadiness) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  Communicator& comm = *be().make_communicators({&world})[0];
  const int n = world.size(), me = world.rank();
  for (DType wire : {DType::F32, DType::BF16}) {
    Flat f = make_flat({{5, 3, 700, 1, 9}}, {}, me);
    BucketOptions o;
    o.bucket_mb = 256.0 / (1024 * 1024);  // 64 floats: several buckets
    o.reduce_dtype = wire;
    GradBuckets b(f.params, f.seg_len, o, comm, be());
    EXPECT_GE(b.num_buckets(), 3);
    b.set_buffer(0, f.segs[0].data());
    b.start();
    for (int i : {0, 2, 4, 1, 3}) b.grad_ready(i);  // not backward order
    b.finish();
    be().device().synchronize();
    for (size_t i = 0; i < f.params.size(); ++i)
      for (int64_t j = 0; j < f.params[i].n; ++j)
        ASSERT_FLOAT_EQ(f.segs[0][size_t(f.params[i].off + j)], summed(n, i, j))
            << dtype_name(wire) << " " << i << "," << j;
  }
}

TEST_P(GradBucketsTest, PlanCoversEveryParameterOnceInBackwardOrder) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  Communicator& comm = *be().make_communicators({&world})[0];
  Flat f = make_flat({{6, 300, 12}, {1, 9, 2000, 2}}, {}, 0);
  BucketOptions o;
  o.bucket_mb = 1024.0 / (1024 * 1024);  // 256 floats
  GradBuckets b(f.params, f.seg_len, o, comm, be());
  std::vector<int> seen(f.params.size(), 0);
  int prev_seg = 1 << 30;
  int64_t prev_lo = 1 << 30;
  for (int k = 0; k < b.num_buckets(); ++k) {
    // Backward order: later segments first, within a segment from the end.
    const int seg = b.bucket_segment(k);
    EXPECT_TRUE(seg < prev_seg || (seg == prev_seg && b.bucket_lo(k) < prev_lo)) << k;
    prev_seg = seg, prev_lo = b.bucket_lo(k);
    int members = 0;
    for (size_t i = 0; i < f.params.size(); ++i)
      if (b.bucket_of(int(i)) == k) {
        ++members, ++seen[i];
        EXPECT_EQ(f.params[i].seg, seg);
        EXPECT_GE(f.params[i].off, b.bucket_lo(k));
        EXPECT_LE(f.params[i].off + f.params[i].n, b.bucket_lo(k) + b.bucket_len(k));
      }
    // Within the cap unless one parameter alone exceeds it.
    if (members > 1) {
      EXPECT_LE(b.bucket_len(k), 256 + 64) << k;
    }
    // One part size, aligned, holding the bucket; members placed in order.
    EXPECT_EQ(b.bucket_part(k) % kPartAlign, 0) << k;
    int64_t total = 0, end = 0;
    for (int i : b.bucket_members(k)) {
      total += f.params[size_t(i)].n;
      EXPECT_GE(b.bucket_pos(i), end) << i;
      end = b.bucket_pos(i) + f.params[size_t(i)].n;
    }
    EXPECT_LE(end, comm.size() * b.bucket_part(k)) << k;
    EXPECT_GE(comm.size() * b.bucket_part(k), total) << k;
  }
  for (int s : seen) EXPECT_EQ(s, 1);
}

// Both gathers of every bucket, checked: in place (each rank writes the
// truth w = 100 * i + j into its own parts of "weights", the rest -1) and
// from a shard (ZeRO 3: the truth in this rank's shard layout, gathered
// bucket by bucket into fresh buffers). One all-gather per bucket each.
void check_gathers(GradBuckets& b, const Flat& f, Communicator& comm, Backend& be) {
  const int64_t per_bucket = comm.size() > 1 ? 1 : 0;
  auto expect_truth = [&](const std::vector<std::vector<float>>& got) {
    for (size_t i = 0; i < f.params.size(); ++i)
      for (int64_t j = 0; j < f.params[i].n; ++j)
        ASSERT_EQ(got[size_t(f.params[i].seg)][size_t(f.params[i].off + j)], float(100 * i + j))
            << i << "," << j;
  };
  std::vector<std::vector<float>> w;
  for (size_t s = 0; s < f.segs.size(); ++s) w.emplace_back(f.segs[s].size(), -1.f);
  for (const ShardPiece& p : b.pieces()) {
    const FlatParam& fp = f.params[size_t(p.param)];
    for (int64_t j = 0; j < p.len; ++j)
      w[size_t(fp.seg)][size_t(fp.off + p.param_off + j)] = float(100 * p.param + p.param_off + j);
  }
  comm.reset_stats();
  b.gather_all({w[0].data(), w[1].data()}, DType::F32);
  be.device().synchronize();
  EXPECT_EQ(comm.stats(CollKind::AllGather).calls, per_bucket * b.num_buckets());
  expect_truth(w);
  std::vector<float> sh(size_t(b.shard_numel()), std::nanf(""));
  for (const ShardPiece& p : b.pieces())
    for (int64_t j = 0; j < p.len; ++j)
      sh[size_t(p.shard_off + j)] = float(100 * p.param + p.param_off + j);
  std::vector<std::vector<float>> w3;
  for (size_t s = 0; s < f.segs.size(); ++s) w3.emplace_back(f.segs[s].size(), -1.f);
  comm.reset_stats();
  std::vector<BucketGather> gs;
  for (int k = 0; k < b.num_buckets(); ++k)
    gs.push_back(b.start_gather(k, sh.data() + b.bucket_shard_off(k), DType::F32,
                                w3[size_t(b.bucket_segment(k))].data() + b.bucket_lo(k),
                                DType::F32));
  for (auto& g : gs) b.finish_gather(g);
  be.device().synchronize();
  EXPECT_EQ(comm.stats(CollKind::AllGather).calls, per_bucket * b.num_buckets());
  expect_truth(w3);
}

TEST_P(GradBucketsTest, ReduceScatterPartitionAndGather) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  Communicator& comm = *be().make_communicators({&world})[0];
  const int n = world.size(), me = world.rank();
  // Some parameters are matrices (rows of 3 or 4): shard cuts fall on rows.
  const std::vector<int64_t> rows{3, 1, 4, 1, 3, 1};
  Flat f = make_flat({{6, 3, 12}, {1, 9, 2}}, rows, me);
  BucketOptions o;
  o.bucket_mb = 160.0 / (1024 * 1024);
  o.reduce_scatter = true;
  o.split_groups = true;
  GradBuckets b(f.params, f.seg_len, o, comm, be());
  for (int k = 0; k < b.num_buckets(); ++k)
    for (size_t i = 0; i < f.params.size(); ++i)
      if (b.bucket_of(int(i)) == k) {
        EXPECT_EQ(f.params[i].group, b.bucket_group(k));
      }
  for (const ShardPiece& p : b.pieces()) {
    EXPECT_EQ(p.param_off % rows[size_t(p.param)], 0) << "piece of " << p.param;
    EXPECT_EQ(p.len % rows[size_t(p.param)], 0) << "piece of " << p.param;
  }
  // Uniform parts: one size per bucket on every rank; the shard is their sum.
  int64_t shard = 0;
  for (int k = 0; k < b.num_buckets(); ++k) {
    double mx = double(b.bucket_part(k)), mn = -mx;
    world.all_reduce_max(&mx, 1);
    world.all_reduce_max(&mn, 1);
    EXPECT_EQ(mx, -mn) << "bucket " << k << ": the part size differs between ranks";
    EXPECT_EQ(b.bucket_shard_off(k), shard);
    shard += b.bucket_part(k);
  }
  EXPECT_EQ(b.shard_numel(), shard);
  for (size_t s = 0; s < f.segs.size(); ++s) b.set_buffer(int(s), f.segs[s].data());
  comm.reset_stats();
  b.reduce_all();
  be().device().synchronize();
  const int64_t per_bucket = n > 1 ? 1 : 0;  // a 1-rank group runs no collective
  EXPECT_EQ(comm.stats(CollKind::ReduceScatter).calls, per_bucket * b.num_buckets());
  EXPECT_EQ(comm.stats(CollKind::AllReduce).calls, 0);
  EXPECT_EQ(comm.stats(CollKind::AllGather).calls, 0);
  // The shard's padding sums zeros.
  std::vector<char> owned(size_t(b.shard_numel()), 0);
  for (const ShardPiece& p : b.pieces())
    std::fill(owned.begin() + p.shard_off, owned.begin() + p.shard_off + p.len, 1);
  for (int64_t j = 0; j < b.shard_numel(); ++j) {
    if (!owned[size_t(j)]) {
      ASSERT_EQ(b.shard_grads()[j], 0.f) << "padding at " << j;
    }
  }
  // Every element is owned by exactly one rank, and holds the sum.
  std::vector<std::vector<double>> cover;
  for (auto& p : f.params) cover.emplace_back(size_t(p.n), 0.0);
  for (const ShardPiece& p : b.pieces())
    for (int64_t j = 0; j < p.len; ++j) {
      cover[size_t(p.param)][size_t(p.param_off + j)] += 1;
      ASSERT_FLOAT_EQ(b.shard_grads()[p.shard_off + j],
                      summed(n, size_t(p.param), p.param_off + j));
    }
  for (auto& c : cover) {
    world.all_reduce_sum(c.data(), int64_t(c.size()));
    for (double x : c) EXPECT_EQ(x, 1.0);
  }
  check_gathers(b, f, comm, be());
}

// Buckets whose layout is the flat one (every parameter a multiple of 64
// elements, each layer 1024 of them: cuts on rows at 1, 2 and 4 ranks) are
// gathered straight into the flat buffers, with no staging buffer.
TEST_P(GradBucketsTest, DirectBucketsGatherWithoutStaging) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  Communicator& comm = *be().make_communicators({&world})[0];
  Flat f = make_flat({{768, 256, 512, 512}, {64, 960}}, {64, 1, 32, 1, 1, 64}, world.rank());
  BucketOptions o;
  o.reduce_scatter = true;
  o.split_groups = true;
  GradBuckets b(f.params, f.seg_len, o, comm, be());
  ASSERT_EQ(b.num_buckets(), 3);
  for (int k = 0; k < b.num_buckets(); ++k) EXPECT_TRUE(b.bucket_direct(k)) << "bucket " << k;
  be().device().reset_peaks();
  check_gathers(b, f, comm, be());
  EXPECT_EQ(be().device().memory().pk(MemCat::Comm), 0) << "a staging buffer was used";
}

// Staged mode as the engine drives it (ZeRO >= 2): per micro-batch, each
// bucket's staging buffer is taken before its gradients are written (at the
// parameter's bucket_pos), the reduce-scatter starts when the bucket is
// complete and adds to the shard; two micro-batches sum. The gradient
// memory never exceeds the shard plus the pool of staging buffers.
TEST_P(GradBucketsTest, StagedReductionAddsEveryMicroBatch) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  Communicator& comm = *be().make_communicators({&world})[0];
  const int n = world.size(), me = world.rank();
  const std::vector<int64_t> rows{3, 1, 4, 1, 3, 1, 5};
  Flat f = make_flat({{6, 3, 12, 1, 9, 2, 700}}, rows, me);
  for (DType wire : {DType::F32, DType::BF16}) {
    BucketOptions o;
    o.bucket_mb = 160.0 / (1024 * 1024);
    o.reduce_scatter = true;
    o.staged = true;
    o.staging = 2;
    o.reduce_dtype = wire;
    GradBuckets b(f.params, f.seg_len, o, comm, be());
    ASSERT_GE(b.num_buckets(), 3);
    Device& dev = be().device();
    const int64_t pool_bytes = 2 * b.max_padded() * 4;
    dev.synchronize();
    dev.reset_peaks();
    const int64_t base = dev.memory().cur(MemCat::Grads);
    comm.reset_stats();
    b.start();
    for (int micro = 0; micro < 2; ++micro)
      for (int k = 0; k < b.num_buckets(); ++k) {  // backward order
        float* st = b.stage(k);
        for (int i : b.bucket_members(k)) {
          const FlatParam& p = f.params[size_t(i)];
          // The gradient written in place, as backward does (host copy: the
          // CPU devices' memory is host memory, enqueued in stream order).
          dev.copy_from_host(st + b.bucket_pos(i), f.segs[0].data() + p.off,
                             size_t(p.n) * sizeof(float), dev.compute_stream());
        }
        for (int i : b.bucket_members(k)) b.grad_ready(i);
      }
    b.finish();
    dev.synchronize();
    EXPECT_EQ(comm.stats(CollKind::ReduceScatter).calls, (n > 1 ? 2 : 0) * b.num_buckets());
    EXPECT_LE(dev.memory().pk(MemCat::Grads) - base, pool_bytes) << dtype_name(wire);
    EXPECT_EQ(dev.memory().cur(MemCat::Grads), base) << "staging left behind";
    for (const ShardPiece& p : b.pieces())
      for (int64_t j = 0; j < p.len; ++j) {
        // bf16 on the wire: each sum rounded to 8 significant bits.
        const float want = 2 * summed(n, size_t(p.param), p.param_off + j);
        ASSERT_NEAR(b.shard_grads()[p.shard_off + j], want,
                    wire == DType::F32 ? 1e-6f * want : want / 64)
            << dtype_name(wire) << " " << p.param << "," << p.param_off + j;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GradBucketsTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "strict" : "inline"; });
}  // namespace

// The one table the ZeRO verbs read (zero_sync.hpp): what each stage shards,
// when gradients are staged and when the updated shards are gathered back.
TEST(ZeroMode, TableOfEveryStage) {
  st::ParallelCfg pc;
  for (int z = 0; z <= 3; ++z) {
    pc.zero_stage = z;
    const st::ZeroMode m = st::zero_mode(pc, 2);
    EXPECT_EQ(m.shard_optim, z >= 1) << z;
    EXPECT_EQ(m.shard_grads, z >= 2) << z;
    EXPECT_EQ(m.shard_weights, z == 3) << z;
    EXPECT_EQ(m.staged, z >= 2) << z;
    EXPECT_EQ(m.regather, z == 1 || z == 2) << z;
    EXPECT_FALSE(st::zero_mode(pc, 1).regather) << z;  // nothing to gather from
  }
  pc.zero_stage = 2;
  pc.zero_full_grads = true;
  EXPECT_FALSE(st::zero_mode(pc, 2).staged);
  pc.zero_full_grads = false;
  pc.num_model_chunks = 2;  // interleaved: the full buffer
  EXPECT_FALSE(st::zero_mode(pc, 2).staged);
}
