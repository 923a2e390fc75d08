// Mesh and gradient buckets under real MPI (2 and 4 ranks): coordinates with
// tp innermost, group membership, pipeline layer ranges, bucketed all-reduce
// with gradients arriving out of order, and the ZeRO partition (every element
// owned by exactly one rank, cuts on row boundaries, reduce-scatter sums,
// all-gather restores).
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>

#include "parallel/grad_buckets.hpp"
#include "parallel/mesh.hpp"

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

std::vector<std::vector<float>> make_grads(const std::vector<int64_t>& sizes, int rank) {
  std::vector<std::vector<float>> g;
  for (size_t i = 0; i < sizes.size(); ++i) {
    g.emplace_back(size_t(sizes[i]));
    for (int64_t j = 0; j < sizes[i]; ++j) g.back()[size_t(j)] = float((rank + 1) * (i + 1) + j);
  }
  return g;
}
float summed(int n, size_t i, int64_t j) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += float((r + 1) * (i + 1) + j);
  return s;
}

TEST(GradBuckets, AllReduceOutOfOrderReadiness) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  const int n = world.size(), me = world.rank();
  const std::vector<int64_t> sizes{5, 3, 70000, 1, 9};
  auto g = make_grads(sizes, me);
  std::vector<GradView> v;
  for (auto& x : g) v.push_back({x.data(), int64_t(x.size()), 0});
  BucketOptions o;
  o.bucket_mb = 64.0 / (1024 * 1024);  // 16 floats: several buckets
  o.scale = 0.5f;
  GradBuckets b(v, o, &world);
  EXPECT_GE(b.num_buckets(), 3);
  b.start();
  for (int i : {0, 2, 4, 1, 3}) b.grad_ready(i);  // not backward order
  b.finish();
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int64_t j = 0; j < sizes[i]; ++j)
      ASSERT_FLOAT_EQ(g[i][size_t(j)], 0.5f * summed(n, i, j)) << i << "," << j;
}

TEST(GradBuckets, ReduceScatterPartitionAndGather) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  const int n = world.size(), me = world.rank();
  // Some parameters are matrices (rows of 3 or 4): shard cuts fall on rows.
  const std::vector<int64_t> sizes{6, 3, 12, 1, 9, 2}, rows{3, 1, 4, 1, 3, 1};
  auto g = make_grads(sizes, me);
  std::vector<GradView> v;
  for (size_t i = 0; i < g.size(); ++i)
    v.push_back({g[i].data(), int64_t(g[i].size()), int(i / 2), rows[i]});
  BucketOptions o;
  o.bucket_mb = 40.0 / (1024 * 1024);
  o.reduce_scatter = true;
  o.split_groups = true;
  GradBuckets b(v, o, &world);
  for (int k = 0; k < b.num_buckets(); ++k) {
    // split_groups: one group per bucket.
    for (size_t i = 0; i < sizes.size(); ++i)
      if (b.bucket_of(int(i)) == k) {
        EXPECT_EQ(int(i / 2), b.bucket_group(k));
      }
  }
  for (const ShardPiece& p : b.pieces()) {
    EXPECT_EQ(p.param_off % rows[size_t(p.param)], 0) << "piece of " << p.param;
    EXPECT_EQ(p.len % rows[size_t(p.param)], 0) << "piece of " << p.param;
  }
  b.reduce_all();
  // Every element is owned by exactly one rank, and holds the sum.
  std::vector<std::vector<double>> cover;
  for (auto s : sizes) cover.emplace_back(size_t(s), 0.0);
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
  // All-gather: shards of "weights" w = 100*i + j, rebuilt on every rank.
  std::vector<std::vector<float>> w(sizes.size());
  std::vector<float*> dst;
  std::vector<const float*> src;
  for (size_t i = 0; i < sizes.size(); ++i) {
    w[i].resize(size_t(sizes[i]));
    for (int64_t j = 0; j < sizes[i]; ++j) w[i][size_t(j)] = me == 0 ? float(100 * i + j) : -1.0f;
  }
  // Rank 0 knows the truth; every rank fills its own shard from a correct copy.
  std::vector<std::vector<float>> truth = w;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int64_t j = 0; j < sizes[i]; ++j) truth[i][size_t(j)] = float(100 * i + j);
  for (size_t i = 0; i < sizes.size(); ++i) {
    src.push_back(truth[i].data());
    dst.push_back(w[i].data());
  }
  std::vector<float> shard(size_t(b.shard_numel()) + 1);
  b.pack_shard(src, shard.data());
  for (int k = 0; k < b.num_buckets(); ++k) b.all_gather_bucket(k, shard.data(), dst);
  EXPECT_EQ(w, truth);
}
}  // namespace
