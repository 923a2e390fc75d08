// Implementation of stages.hpp.
#include "parallel/stages.hpp"

#include "core/error.hpp"

namespace st {

MeshCoords mesh_coords(int rank, const MeshDims& d) {
  MeshCoords c;
  c.tp = rank % d.tp;
  rank /= d.tp;
  c.cp = rank % d.cp;
  rank /= d.cp;
  c.dp = rank % d.dp;
  c.pp = rank / d.dp;
  return c;
}

int mesh_rank(const MeshCoords& c, const MeshDims& d) {
  return ((c.pp * d.dp + c.dp) * d.cp + c.cp) * d.tp + c.tp;
}

std::vector<std::pair<int, int>> stage_layers(int n_layers, int pp, int chunks, int stage) {
  ST_CHECK(pp >= 1 && chunks >= 1 && n_layers % (pp * chunks) == 0, "n_layers ", n_layers,
           " does not split into pp*chunks = ", pp * chunks, " equal parts");
  const int per = n_layers / (pp * chunks);
  std::vector<std::pair<int, int>> r;
  for (int c = 0; c < chunks; ++c) {
    const int first = (c * pp + stage) * per;
    r.push_back({first, first + per});
  }
  return r;
}

}  // namespace st
