// Typed mesh axes (communicator.hpp's GroupAxis): every group the mesh makes
// carries its axis, its world-rank stride and whether it stays inside a
// node; dups (the pipeline's links) keep it; the planner reads kernels by
// their typed kind and refuses one it cannot price. On real MPI ranks (one
// node here: every group is inside it) and on the recording backend's
// groups with a stated node size.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "parallel/mesh.hpp"
#include "plan/recorded_step.hpp"
#include "record/record.hpp"

using namespace st;

namespace {

TEST(MeshAxes, MpiGroupsCarryTheirAxisStrideAndNode) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  ASSERT_EQ(n, 4);
  MpiCommunicator world(MPI_COMM_WORLD, "world", 60);
  Mesh m(world, MeshDims{1, 2, 1, 2});
  EXPECT_EQ(m.tp().axis().axis, Axis::Tp);
  EXPECT_EQ(m.tp().axis().stride, 1);
  EXPECT_EQ(m.dp().axis().axis, Axis::Dp);
  EXPECT_EQ(m.dp().axis().stride, 2);
  EXPECT_EQ(m.dpcp().axis().axis, Axis::DpCp);
  EXPECT_EQ(m.dpcp().axis().stride, 2);
  EXPECT_EQ(m.cp().axis().axis, Axis::Cp);
  EXPECT_EQ(m.pp().axis().axis, Axis::Pp);
  EXPECT_EQ(m.pp().axis().stride, 4);
  for (Communicator* g : m.groups()) EXPECT_TRUE(g->axis().intra_node) << g->name();
  auto link = m.pp().dup_group("pp_f0");
  EXPECT_EQ(link->axis().axis, Axis::Pp);
  EXPECT_EQ(world.axis().axis, Axis::None);
}

TEST(MeshAxes, RecordedGroupsKnowWhichAxesCrossNodes) {
  record::Recording rec;
  // pp 2 x dp 2 x cp 1 x tp 2 = 8 ranks, 2 per node: rank 5 = pp 1, dp 0, tp 1.
  auto make = [&](const std::string& name, int r, int s) {
    return std::make_unique<record::RecordCommunicator>(rec, name, r, s);
  };
  Mesh m(5, MeshDims{2, 2, 1, 2}, make, 2);
  EXPECT_TRUE(m.tp().axis().intra_node);    // ranks 4, 5
  EXPECT_FALSE(m.dp().axis().intra_node);   // ranks 5, 7
  EXPECT_FALSE(m.pp().axis().intra_node);   // ranks 1, 5
  EXPECT_TRUE(m.cp().axis().intra_node);    // rank 5 alone
  EXPECT_EQ(m.pp().axis().stride, 4);
  Mesh wide(5, MeshDims{2, 2, 1, 2}, make, 8);
  for (Communicator* g : wide.groups()) EXPECT_TRUE(g->axis().intra_node) << g->name();
  Mesh unknown(5, MeshDims{2, 2, 1, 2}, make);
  EXPECT_FALSE(unknown.tp().axis().intra_node);
  // A collective recorded on a group carries the group's axis.
  record::RecordDevice dev(rec);
  float x[4];
  m.pp().dup_group("pp_f0")->exchange({{true, x, 4, 0}}, DType::F32, dev.compute_stream());
  ASSERT_EQ(rec.collectives().size(), 1u);
  EXPECT_EQ(rec.collectives()[0].axis.axis, Axis::Pp);
  EXPECT_EQ(rec.collectives()[0].axis.stride, 4);
}

TEST(MeshAxes, AKernelWithoutAPriceIsAnError) {
  record::KernelCall k;
  k.kind = record::Kernel::Gemm;
  k.dims = {8, 8, 8};
  EXPECT_EQ(plan::kernel_op(k).kind, plan::OpKind::Gemm);
  k.kind = record::Kernel::kCount;
  k.op = "fused_mystery";
  EXPECT_THROW(plan::kernel_op(k), Error);
}

}  // namespace
