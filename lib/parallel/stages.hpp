// The arithmetic of the process mesh that needs no process: the mesh
// dimensions, a rank's coordinates (tp innermost, then cp, dp, pp; see
// mesh.hpp) and the layers of each pipeline stage's model chunks. Apart from
// mesh.hpp (which makes the MPI groups) so the planner and the recording
// backend use the trainer's own rules without MPI.
#pragma once
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace st {

struct MeshDims {
  int pp = 1, dp = 1, cp = 1, tp = 1;
  int world() const { return pp * dp * cp * tp; }
};

struct MeshCoords {
  int pp = 0, dp = 0, cp = 0, tp = 0;
};

// rank = ((pp * dp_size + dp) * cp_size + cp) * tp_size + tp.
MeshCoords mesh_coords(int rank, const MeshDims& d);
int mesh_rank(const MeshCoords& c, const MeshDims& d);

// Layers [first, last) of every model chunk a pipeline stage holds, in chunk
// order. With `chunks` > 1 (interleaved schedule) stage s holds chunks
// c*pp + s for c = 0..chunks-1. `chunk_layers` gives each of the pp*chunks
// chunks' layer count in forward order (config's pipeline_layer_counts).
std::vector<std::pair<int, int>> stage_layers(const std::vector<int>& chunk_layers, int pp,
                                              int stage);
// The same for cfg's split (parallel.pipeline_layers, or the even one).
std::vector<std::pair<int, int>> stage_layers(const Config& cfg, int stage);
// The even split: each chunk n_layers / (pp*chunks) layers long.
std::vector<std::pair<int, int>> stage_layers(int n_layers, int pp, int chunks, int stage);
}  // namespace st
