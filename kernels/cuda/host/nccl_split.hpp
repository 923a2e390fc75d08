// How the CUDA backend's NCCL communicators come from one world
// communicator by ncclCommSplit, planned on the host and compiled without
// nvcc (label cuda-host). ncclCommSplit is collective over every rank of
// the parent, and groups the ranks by color in key order (ties by parent
// rank) as MPI_Comm_split does; a rank outside every group of a call passes
// NCCL_SPLIT_NOCOLOR (-1 here). So every rank must make the same calls in
// the same order. Backend::make_communicators hands over, on every rank, one
// group per role in one order (the k-th entries of all ranks partition the
// world); gather_groups() makes every rank's groups known to all, tagged by
// their role, and plan_nccl_splits() turns them into a fixed list of calls,
// each creating a set of disjoint groups at once, with each rank's color and
// key per call. Two roles over the same ranks (the pipeline's links, dups of
// one group) are two groups: two communicators, two message orders.
#pragma once
#include <mpi.h>

#include <vector>

#include "comm/mpi_communicator.hpp"

namespace st::cuda_host {

// A group: its role (the index in every member's list) and its members as
// world ranks in group-rank order.
struct RoleGroup {
  int role = 0;
  std::vector<int> ranks;
  bool operator<(const RoleGroup& o) const {
    return role != o.role ? role < o.role : ranks < o.ranks;
  }
  bool operator==(const RoleGroup& o) const { return role == o.role && ranks == o.ranks; }
};

// One ncclCommSplit call: color[r] (-1: no color) and key[r] per world rank.
struct SplitCall {
  std::vector<int> color, key;
  std::vector<int> groups;  // the plan's group indices this call creates, by color
};

struct SplitPlan {
  std::vector<RoleGroup> groups;  // distinct groups of 2+ ranks, in the fixed order
  std::vector<SplitCall> calls;
  std::vector<int> call_of;  // per group: the call that creates it
};

// The plan for `groups` (every rank's groups, duplicates allowed: each member
// reports its own). Groups of one rank need no NCCL communicator and get no
// call. Groups are ordered by (role, members); each goes into the first
// call whose groups it does not overlap. Throws st::Error naming the role on
// a rank outside [0, world) or listed twice in a group, or on a role whose
// groups do not partition the world (two groups sharing a rank, or a rank in
// none: the ranks handed over different lists).
SplitPlan plan_nccl_splits(int world, std::vector<RoleGroup> groups);

// For each of this rank's groups (`mine`, in role order), the call of `plan`
// that creates its communicator, or -1 for a group of one rank.
std::vector<int> calls_for(const SplitPlan& plan, const std::vector<RoleGroup>& mine);

// Members of each MPI communicator in `mine` as world ranks in group-rank
// order, tagged with its index as the role (local, no communication).
std::vector<RoleGroup> role_groups(MPI_Comm world, const std::vector<MPI_Comm>& mine);

// Every rank's role_groups(), gathered through `world`'s front (collective
// over it, under its timeout).
std::vector<RoleGroup> gather_groups(MpiCommunicator& world, const std::vector<MPI_Comm>& mine);
}  // namespace st::cuda_host
