// ncclCommSplit planning (see nccl_split.hpp).
#include "kernels/cuda/host/nccl_split.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "core/error.hpp"

namespace st::cuda_host {

SplitPlan plan_nccl_splits(int world, std::vector<RoleGroup> groups) {
  for (const auto& g : groups) {
    std::set<int> seen;
    for (int r : g.ranks) {
      ST_CHECK(r >= 0 && r < world, "NCCL split plan: role ", g.role, ": rank ", r,
               " outside the world of ", world);
      ST_CHECK(seen.insert(r).second, "NCCL split plan: role ", g.role, ": rank ", r,
               " twice in one group");
    }
  }
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  // Each role's groups partition the world: every rank in exactly one.
  int roles = 0;
  for (const auto& g : groups) roles = std::max(roles, g.role + 1);
  std::vector<std::vector<int>> in(size_t(roles), std::vector<int>(size_t(world), 0));
  for (const auto& g : groups)
    for (int r : g.ranks) in[size_t(g.role)][size_t(r)] += 1;
  for (int k = 0; k < roles; ++k)
    for (int r = 0; r < world; ++r)
      ST_CHECK(in[size_t(k)][size_t(r)] == 1, "NCCL split plan: rank ", r, " is in ",
               in[size_t(k)][size_t(r)], " groups of role ", k,
               " (each rank must hand over one group per role, in one order)");
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [](const RoleGroup& g) { return g.ranks.size() < 2; }),
               groups.end());
  SplitPlan p;
  p.groups = groups;
  std::vector<std::vector<bool>> used;  // per call, per world rank
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int>& ranks = groups[g].ranks;
    size_t c = 0;
    for (; c < used.size(); ++c)
      if (std::none_of(ranks.begin(), ranks.end(), [&](int r) { return used[c][size_t(r)]; }))
        break;
    if (c == used.size()) {
      used.emplace_back(size_t(world), false);
      p.calls.push_back(
          {std::vector<int>(size_t(world), -1), std::vector<int>(size_t(world), 0), {}});
    }
    SplitCall& call = p.calls[c];
    const int color = int(call.groups.size());
    call.groups.push_back(int(g));
    for (size_t k = 0; k < ranks.size(); ++k) {
      const size_t r = size_t(ranks[k]);
      used[c][r] = true;
      call.color[r] = color;
      call.key[r] = int(k);
    }
    p.call_of.push_back(int(c));
  }
  return p;
}

std::vector<int> calls_for(const SplitPlan& plan, const std::vector<RoleGroup>& mine) {
  std::vector<int> out;
  for (const RoleGroup& g : mine) {
    if (g.ranks.size() < 2) {
      out.push_back(-1);
      continue;
    }
    const auto it = std::find(plan.groups.begin(), plan.groups.end(), g);
    ST_CHECK(it != plan.groups.end(), "NCCL split plan: role ", g.role, " (", g.ranks.size(),
             " ranks) is not in the plan");
    out.push_back(plan.call_of[size_t(it - plan.groups.begin())]);
  }
  return out;
}

std::vector<RoleGroup> role_groups(MPI_Comm world, const std::vector<MPI_Comm>& mine) {
  MPI_Group wg;
  ST_MPI_CHECK(MPI_Comm_group(world, &wg));
  std::vector<RoleGroup> out;
  for (size_t k = 0; k < mine.size(); ++k) {
    MPI_Group g;
    int size = 0;
    ST_MPI_CHECK(MPI_Comm_group(mine[k], &g));
    ST_MPI_CHECK(MPI_Group_size(g, &size));
    std::vector<int> in(static_cast<size_t>(size)), ranks(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) in[size_t(i)] = i;
    ST_MPI_CHECK(MPI_Group_translate_ranks(g, size, in.data(), wg, ranks.data()));
    ST_MPI_CHECK(MPI_Group_free(&g));
    out.push_back({int(k), std::move(ranks)});
  }
  ST_MPI_CHECK(MPI_Group_free(&wg));
  return out;
}

std::vector<RoleGroup> gather_groups(MpiCommunicator& world, const std::vector<MPI_Comm>& mine) {
  // Flattened as [role, size, members...] per group.
  std::vector<int32_t> flat;
  for (const RoleGroup& g : role_groups(world.mpi(), mine)) {
    flat.push_back(g.role);
    flat.push_back(int32_t(g.ranks.size()));
    flat.insert(flat.end(), g.ranks.begin(), g.ranks.end());
  }
  // Sent as bytes through the front's variable-length gather.
  const std::string bytes(reinterpret_cast<const char*>(flat.data()),
                          flat.size() * sizeof(int32_t));
  std::vector<RoleGroup> groups;
  for (const std::string& got : all_gather_strings(world, bytes)) {
    std::vector<int32_t> all(got.size() / sizeof(int32_t));
    std::memcpy(all.data(), got.data(), all.size() * sizeof(int32_t));
    for (size_t i = 0; i + 1 < all.size();) {
      const int role = all[i++], sz = all[i++];
      groups.push_back({role, std::vector<int>(all.begin() + long(i), all.begin() + long(i) + sz)});
      i += size_t(sz);
    }
  }
  return groups;
}
}  // namespace st::cuda_host
