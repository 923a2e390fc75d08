// How the CUDA backend's NCCL communicators come from one world
// communicator by ncclCommSplit, planned on the host and compiled without
// nvcc (label cuda-host). ncclCommSplit is collective over every rank of
// the parent, and groups the ranks by color in key order (ties by parent
// rank) as MPI_Comm_split does; a rank outside every group of a call passes
// NCCL_SPLIT_NOCOLOR (-1 here). So every rank must make the same calls in
// the same order: gather_groups() makes every rank's MPI groups (as world
// ranks in group-rank order) known to all, and plan_nccl_splits() turns
// them into a fixed list of calls, each creating a set of disjoint groups
// at once, with each rank's color and key per call.
#pragma once
#include <mpi.h>

#include <vector>

namespace st::cuda_host {

// One ncclCommSplit call: color[r] (-1: no color) and key[r] per world rank.
struct SplitCall {
  std::vector<int> color, key;
  std::vector<int> groups;  // the plan's group indices this call creates, by color
};

struct SplitPlan {
  std::vector<std::vector<int>> groups;  // distinct groups of 2+ ranks, in the fixed order
  std::vector<SplitCall> calls;
  std::vector<int> call_of;  // per group: the call that creates it
};

// The plan for `groups` (world ranks in group-rank order; duplicates and
// groups of one rank, which need no NCCL communicator, are left out).
// Groups are ordered by their member lists; each goes into the first call
// whose groups it does not overlap. Throws st::Error on a rank outside
// [0, world) or listed twice in a group, or on two groups with the same
// members in different orders (NCCL could not give both their rank order).
SplitPlan plan_nccl_splits(int world, std::vector<std::vector<int>> groups);

// Every group any rank belongs to, as world ranks in group-rank order
// (collective over `world`; each rank passes the MPI communicators of its
// own groups, MpiCommunicator::mpi()).
std::vector<std::vector<int>> gather_groups(MPI_Comm world, const std::vector<MPI_Comm>& mine);
}  // namespace st::cuda_host
