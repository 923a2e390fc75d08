// Implementation of mesh.hpp.
#include "parallel/mesh.hpp"

#include "core/error.hpp"

namespace st {

Mesh::Mesh(int rank, const MeshDims& d, const GroupMaker& make) : dims_(d), rank_(rank) {
  ST_CHECK(rank >= 0 && rank < d.world(), "mesh rank ", rank, " outside pp*dp*cp*tp = ", d.world());
  coords_ = mesh_coords(rank, d);
  const MeshCoords& c = coords_;
  tp_ = make("tp", c.tp, d.tp);
  cp_ = make("cp", c.cp, d.cp);
  dp_ = make("dp", c.dp, d.dp);
  pp_ = make("pp", c.pp, d.pp);
  dpcp_ = make("dp_cp", c.dp * d.cp + c.cp, d.dp * d.cp);
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
