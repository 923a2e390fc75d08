// The process mesh: world = pp x dp x cp x tp with tp innermost (consecutive
// ranks, so a tensor-parallel group stays inside a node), then cp, then dp,
// pp outermost (Megatron's order). A rank's coordinates, one Communicator per
// group, the dp x cp group over which gradients are reduced and ZeRO shards
// live, and the pipeline layer ranges (contiguous stages, or interleaved
// model chunks) are all derived here so every part of the program agrees.
// The groups are HostGroups: MPI communicators in a job (mesh_mpi.cpp, the
// only part that needs MPI), the recording backend's when one rank's step is
// run without processes (--dry-run, the planner). A device backend builds its
// own communicators on them.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "parallel/stages.hpp"

namespace st {

class Mesh {
 public:
  // Collective over `world` (its size must equal d.world()).
  // Every group carries its axis (communicator.hpp's GroupAxis): whether it
  // stays inside a node comes from where the ranks run (MPI's shared-memory
  // split of the group).
  Mesh(const MpiCommunicator& world, const MeshDims& d);
  // Rank `rank` of d.world() with groups from make(name, rank in the group,
  // group size): no processes, no collective. A group stays inside a node
  // when its members' world ranks fall in one block of `ranks_per_node`
  // (consecutive placement, as Slurm and mpirun place ranks; 0: unknown, no
  // group is inside a node).
  using GroupMaker =
      std::function<std::unique_ptr<HostGroup>(const std::string& name, int rank, int size)>;
  Mesh(int rank, const MeshDims& d, const GroupMaker& make, int ranks_per_node = 0);
  const MeshDims& dims() const { return dims_; }
  const MeshCoords& coords() const { return coords_; }
  int rank() const { return rank_; }

  // Groups (host): ranks that differ only in that coordinate. A
  // backend turns each into a communicator for its device's buffers
  // (Backend::communicator); the host groups carry the scalars.
  HostGroup& tp() { return *tp_; }
  HostGroup& cp() { return *cp_; }
  HostGroup& dp() { return *dp_; }
  HostGroup& pp() { return *pp_; }
  // dp x cp: where local gradients are summed (and ZeRO shards live).
  HostGroup& dpcp() { return *dpcp_; }
  // Every group, for resetting and summing collective statistics.
  std::vector<Communicator*> groups();

  bool first_stage() const { return coords_.pp == 0; }
  bool last_stage() const { return coords_.pp == dims_.pp - 1; }
  std::string describe() const;  // "pp 0/2 dp 1/2 cp 0/1 tp 1/2"

 private:
  MeshDims dims_;
  MeshCoords coords_;
  int rank_ = 0;
  std::unique_ptr<HostGroup> tp_, cp_, dp_, pp_, dpcp_;
  // Sets every group's axis; intra(a) says whether axis a's group is inside a node.
  void set_axes(const std::function<bool(HostGroup&, Axis)>& intra);
};

// The axis of a group of `d` and the world-rank stride between its members
// (tp innermost, then cp, dp, pp; dp x cp steps by tp), without the node flag.
GroupAxis mesh_axis(Axis a, const MeshDims& d);
// The world ranks of the first and the last member of rank `rank`'s group
// on axis a (the block its members span).
std::pair<int, int> mesh_axis_span(Axis a, int rank, const MeshDims& d);
}  // namespace st
