// ncclCommSplit planning (see nccl_split.hpp).
#include "kernels/cuda/host/nccl_split.hpp"

#include <mpi.h>

#include <algorithm>
#include <set>

#include "core/error.hpp"

namespace st::cuda_host {

SplitPlan plan_nccl_splits(int world, std::vector<std::vector<int>> groups) {
  for (const auto& g : groups) {
    std::set<int> seen;
    for (int r : g) {
      ST_CHECK(r >= 0 && r < world, "NCCL split plan: rank ", r, " outside the world of ", world);
      ST_CHECK(seen.insert(r).second, "NCCL split plan: rank ", r, " twice in one group");
    }
  }
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [](const std::vector<int>& g) { return g.size() < 2; }),
               groups.end());
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  for (size_t i = 0; i + 1 < groups.size(); ++i)
    for (size_t j = i + 1; j < groups.size(); ++j) {
      std::vector<int> a = groups[i], b = groups[j];
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      ST_CHECK(a != b, "NCCL split plan: two groups with the same ranks in different orders");
    }
  SplitPlan p;
  p.groups = groups;
  std::vector<std::vector<bool>> used;  // per call, per world rank
  for (size_t g = 0; g < groups.size(); ++g) {
    size_t c = 0;
    for (; c < used.size(); ++c)
      if (std::none_of(groups[g].begin(), groups[g].end(),
                       [&](int r) { return used[c][size_t(r)]; }))
        break;
    if (c == used.size()) {
      used.emplace_back(size_t(world), false);
      p.calls.push_back(
          {std::vector<int>(size_t(world), -1), std::vector<int>(size_t(world), 0), {}});
    }
    SplitCall& call = p.calls[c];
    const int color = int(call.groups.size());
    call.groups.push_back(int(g));
    for (size_t k = 0; k < groups[g].size(); ++k) {
      const size_t r = size_t(groups[g][k]);
      used[c][r] = true;
      call.color[r] = color;
      call.key[r] = int(k);
    }
    p.call_of.push_back(int(c));
  }
  return p;
}

std::vector<std::vector<int>> gather_groups(MPI_Comm world, const std::vector<MPI_Comm>& mine) {
  // Each group as world ranks in group-rank order, flattened as
  // [size, members...] per group.
  MPI_Group wg;
  ST_MPI_CHECK(MPI_Comm_group(world, &wg));
  std::vector<int> flat;
  for (MPI_Comm c : mine) {
    MPI_Group g;
    int size = 0;
    ST_MPI_CHECK(MPI_Comm_group(c, &g));
    ST_MPI_CHECK(MPI_Group_size(g, &size));
    std::vector<int> in(static_cast<size_t>(size)), out(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) in[size_t(i)] = i;
    ST_MPI_CHECK(MPI_Group_translate_ranks(g, size, in.data(), wg, out.data()));
    ST_MPI_CHECK(MPI_Group_free(&g));
    flat.push_back(size);
    flat.insert(flat.end(), out.begin(), out.end());
  }
  ST_MPI_CHECK(MPI_Group_free(&wg));
  const int n = int(flat.size());
  int wsize = 0;
  ST_MPI_CHECK(MPI_Comm_size(world, &wsize));
  std::vector<int> counts(static_cast<size_t>(wsize)), displs(static_cast<size_t>(wsize));
  ST_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, world));
  int total = 0;
  for (size_t i = 0; i < counts.size(); ++i) displs[i] = total, total += counts[i];
  std::vector<int> all(size_t(std::max(total, 1)));
  ST_MPI_CHECK(MPI_Allgatherv(flat.data(), n, MPI_INT, all.data(), counts.data(), displs.data(),
                              MPI_INT, world));
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < total;) {
    const int sz = all[size_t(i++)];
    groups.emplace_back(all.begin() + i, all.begin() + i + sz);
    i += sz;
  }
  return groups;
}
}  // namespace st::cuda_host
