// Implementation of mesh.hpp.
#include "parallel/mesh.hpp"

#include "core/error.hpp"

namespace st {

GroupAxis mesh_axis(Axis a, const MeshDims& d) {
  GroupAxis g;
  g.axis = a;
  switch (a) {
    case Axis::None:
    case Axis::Tp:
      g.stride = 1;
      break;
    case Axis::Cp:
    case Axis::DpCp:
      g.stride = d.tp;
      break;
    case Axis::Dp:
      g.stride = d.tp * d.cp;
      break;
    case Axis::Pp:
      g.stride = d.tp * d.cp * d.dp;
      break;
  }
  return g;
}

std::pair<int, int> mesh_axis_span(Axis a, int rank, const MeshDims& d) {
  MeshCoords lo = mesh_coords(rank, d), hi = lo;
  switch (a) {
    case Axis::Tp:
      lo.tp = 0, hi.tp = d.tp - 1;
      break;
    case Axis::Cp:
      lo.cp = 0, hi.cp = d.cp - 1;
      break;
    case Axis::Dp:
      lo.dp = 0, hi.dp = d.dp - 1;
      break;
    case Axis::DpCp:
      lo.dp = lo.cp = 0, hi.dp = d.dp - 1, hi.cp = d.cp - 1;
      break;
    case Axis::Pp:
      lo.pp = 0, hi.pp = d.pp - 1;
      break;
    case Axis::None:
      return {0, d.world() - 1};
  }
  return {mesh_rank(lo, d), mesh_rank(hi, d)};
}

void Mesh::set_axes(const std::function<bool(HostGroup&, Axis)>& intra) {
  const std::pair<HostGroup*, Axis> all[] = {{tp_.get(), Axis::Tp},
                                             {cp_.get(), Axis::Cp},
                                             {dp_.get(), Axis::Dp},
                                             {pp_.get(), Axis::Pp},
                                             {dpcp_.get(), Axis::DpCp}};
  for (const auto& [g, a] : all) {
    GroupAxis x = mesh_axis(a, dims_);
    x.intra_node = intra(*g, a);
    g->set_axis(x);
  }
}

Mesh::Mesh(int rank, const MeshDims& d, const GroupMaker& make, int ranks_per_node)
    : dims_(d), rank_(rank) {
  ST_CHECK(rank >= 0 && rank < d.world(), "mesh rank ", rank, " outside pp*dp*cp*tp = ", d.world());
  coords_ = mesh_coords(rank, d);
  const MeshCoords& c = coords_;
  tp_ = make("tp", c.tp, d.tp);
  cp_ = make("cp", c.cp, d.cp);
  dp_ = make("dp", c.dp, d.dp);
  pp_ = make("pp", c.pp, d.pp);
  dpcp_ = make("dp_cp", c.dp * d.cp + c.cp, d.dp * d.cp);
  const std::function<bool(HostGroup&, Axis)> intra = [&](HostGroup&, Axis a) {
    if (ranks_per_node <= 0) return false;
    const auto [lo, hi] = mesh_axis_span(a, rank, d);
    return lo / ranks_per_node == hi / ranks_per_node;
  };
  set_axes(intra);
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
