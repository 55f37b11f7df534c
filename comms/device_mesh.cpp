#include "comms/device_mesh.h"

#include <mpi.h>

namespace titan::comms {

MeshDegrees resolve_degrees(MeshDegrees d, int64_t world) {
  auto bad = [&](const std::string& why) {
    fail("parallelism: ", why, " (data_parallel_replicate_degree ", d.dp_replicate, ", data_parallel_shard_degree ",
         d.dp_shard, ", tensor_parallel_degree ", d.tp, ", world size ", world, ")");
  };
  if (d.dp_replicate < 1 || d.tp < 1 || (d.dp_shard < 1 && d.dp_shard != -1)) bad("degrees must be >= 1 (or -1 for dp_shard)");
  if (d.dp_shard == -1) {
    if (world % (d.dp_replicate * d.tp) != 0) bad("the world size is not divisible by dp_replicate x tp");
    d.dp_shard = world / (d.dp_replicate * d.tp);
  }
  if (d.dp_replicate * d.dp_shard * d.tp != world)
    bad("dp_replicate x dp_shard x tp = " + std::to_string(d.dp_replicate * d.dp_shard * d.tp) +
        " does not equal the world size");
  return d;
}

DeviceMesh::DeviceMesh(MeshDegrees d, bool fake, int fake_rank, int fake_world) {
  world = fake ? fake_world : world_size();
  rank = fake ? fake_rank : world_rank();
  degrees = resolve_degrees(d, world);
  const int64_t S = degrees.dp_shard, T = degrees.tp;
  tp_rank = (int)(rank % T);
  shard_rank = (int)((rank / T) % S);
  replicate_rank = (int)(rank / (T * S));
  auto group = [&](int color, int key, int size, int grank, const std::string& name) -> PG {
    if (fake) return ProcessGroup::fake(grank, size, name);
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);
    auto pg = std::make_shared<ProcessGroup>(c, name);
    MPI_Comm_free(&c);
    return pg;
  };
  world_pg = group(0, rank, world, rank, "world");
  tp = group(replicate_rank * S + shard_rank, tp_rank, (int)T, tp_rank, "tp");
  dp_shard = group(replicate_rank * T + tp_rank, shard_rank, (int)S, shard_rank, "dp_shard");
  dp_replicate = group(shard_rank * T + tp_rank, replicate_rank, (int)degrees.dp_replicate, replicate_rank,
                       "dp_replicate");
  dp = group(tp_rank, replicate_rank * S + shard_rank, (int)(degrees.dp_replicate * S), (int)dp_rank(), "dp");
}

std::string DeviceMesh::describe() const {
  return "world " + std::to_string(world) + " = dp_replicate " + std::to_string(degrees.dp_replicate) +
         " x dp_shard " + std::to_string(degrees.dp_shard) + " x tp " + std::to_string(degrees.tp);
}

}  // namespace titan::comms
