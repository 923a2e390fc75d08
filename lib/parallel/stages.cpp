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

std::vector<std::pair<int, int>> stage_layers(const std::vector<int>& chunk_layers, int pp,
                                              int stage) {
  const int n = int(chunk_layers.size());
  ST_CHECK(pp >= 1 && n >= pp && n % pp == 0 && stage >= 0 && stage < pp, "a split of ", n,
           " model chunks does not fit pp = ", pp, " (stage ", stage, ")");
  std::vector<int> first(size_t(n) + 1, 0);
  for (int k = 0; k < n; ++k) {
    ST_CHECK(chunk_layers[size_t(k)] >= 1, "model chunk ", k, " has no layers");
    first[size_t(k) + 1] = first[size_t(k)] + chunk_layers[size_t(k)];
  }
  std::vector<std::pair<int, int>> r;
  for (int k = stage; k < n; k += pp) r.push_back({first[size_t(k)], first[size_t(k) + 1]});
  return r;
}

std::vector<std::pair<int, int>> stage_layers(const Config& cfg, int stage) {
  return stage_layers(pipeline_layer_counts(cfg), cfg.parallel.pp, stage);
}

std::vector<std::pair<int, int>> stage_layers(int n_layers, int pp, int chunks, int stage) {
  ST_CHECK(pp >= 1 && chunks >= 1 && n_layers % (pp * chunks) == 0, "n_layers ", n_layers,
           " does not split into pp*chunks = ", pp * chunks, " equal parts");
  return stage_layers(std::vector<int>(size_t(pp * chunks), n_layers / (pp * chunks)), pp, stage);
}

}  // namespace st
