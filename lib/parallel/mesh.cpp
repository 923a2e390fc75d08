// Implementation of mesh.hpp.
#include "parallel/mesh.hpp"

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

Mesh::Mesh(const MpiCommunicator& world, const MeshDims& d) : dims_(d), rank_(world.rank()) {
  ST_CHECK(world.size() == d.world(), "mesh pp*dp*cp*tp = ", d.world(), " but world size is ",
           world.size());
  coords_ = mesh_coords(rank_, d);
  const MeshCoords& c = coords_;
  // Colour: the rank with this group's coordinate set to 0; key: the coordinate.
  auto colour = [&](MeshCoords z) { return mesh_rank(z, d); };
  MeshCoords z;
  z = c, z.tp = 0;
  tp_ = world.split(colour(z), c.tp, "tp");
  z = c, z.cp = 0;
  cp_ = world.split(colour(z), c.cp, "cp");
  z = c, z.dp = 0;
  dp_ = world.split(colour(z), c.dp, "dp");
  z = c, z.pp = 0;
  pp_ = world.split(colour(z), c.pp, "pp");
  z = c, z.dp = 0, z.cp = 0;
  dpcp_ = world.split(colour(z), c.dp * d.cp + c.cp, "dp_cp");
}

std::vector<Communicator*> Mesh::groups() {
  return {tp_.get(), cp_.get(), dp_.get(), pp_.get(), dpcp_.get()};
}

std::string Mesh::describe() const {
  auto f = [](const char* n, int v, int s) {
    return std::string(n) + " " + std::to_string(v) + "/" + std::to_string(s);
  };
  return f("pp", coords_.pp, dims_.pp) + " " + f("dp", coords_.dp, dims_.dp) + " " +
         f("cp", coords_.cp, dims_.cp) + " " + f("tp", coords_.tp, dims_.tp);
}
}  // namespace st
