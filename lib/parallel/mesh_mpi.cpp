// The MPI constructor of the mesh (mesh.hpp): the groups split from the
// world communicator. The only part of lib/parallel that needs MPI.
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "parallel/mesh.hpp"

namespace st {

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
  // Inside a node: every member in this rank's shared-memory split of the group.
  const std::function<bool(HostGroup&, Axis)> intra = [](HostGroup& g, Axis) {
    auto& m = static_cast<MpiCommunicator&>(g);
    MPI_Comm local;
    ST_MPI_CHECK(MPI_Comm_split_type(m.mpi(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
    int n = 0;
    ST_MPI_CHECK(MPI_Comm_size(local, &n));
    MPI_Comm_free(&local);
    return n == m.size();
  };
  set_axes(intra);
}

}  // namespace st
