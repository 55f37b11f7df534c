#include "comms/device_mesh.h"

#include <mpi.h>

#include <algorithm>
#include <functional>

namespace titan::comms {

MeshDegrees resolve_degrees(MeshDegrees d, int64_t world) {
  auto bad = [&](const std::string& why) {
    fail("parallelism: ", why, " (pipeline_parallel_degree ", d.pp, ", data_parallel_replicate_degree ",
         d.dp_replicate, ", data_parallel_shard_degree ", d.dp_shard, ", tensor_parallel_degree ", d.tp,
         ", world size ", world, ")");
  };
  if (d.pp < 1 || d.dp_replicate < 1 || d.tp < 1 || (d.dp_shard < 1 && d.dp_shard != -1))
    bad("degrees must be >= 1 (or -1 for dp_shard)");
  if (d.dp_shard == -1) {
    if (world % (d.pp * d.dp_replicate * d.tp) != 0) bad("the world size is not divisible by pp x dp_replicate x tp");
    d.dp_shard = world / (d.pp * d.dp_replicate * d.tp);
  }
  if (d.pp * d.dp_replicate * d.dp_shard * d.tp != world)
    bad("pp x dp_replicate x dp_shard x tp = " + std::to_string(d.pp * d.dp_replicate * d.dp_shard * d.tp) +
        " does not equal the world size");
  return d;
}

DeviceMesh::DeviceMesh(MeshDegrees d, bool fake, int fake_rank, int fake_world) {
  world = fake ? fake_world : world_size();
  rank = fake ? fake_rank : world_rank();
  degrees = resolve_degrees(d, world);
  const int64_t S = degrees.dp_shard, T = degrees.tp, R = degrees.dp_replicate;
  tp_rank = (int)(rank % T);
  shard_rank = (int)((rank / T) % S);
  replicate_rank = (int)((rank / (T * S)) % R);
  pp_rank = (int)(rank / (T * S * R));
  // Each group: the world ranks of equal color, ordered by key (colors and keys are functions of a world
  // rank, so a fake mesh lists every group's members without communicating).
  auto tp_of = [T](int w) { return (int)(w % T); };
  auto shard_of = [T, S](int w) { return (int)((w / T) % S); };
  auto repl_of = [T, S, R](int w) { return (int)((w / (T * S)) % R); };
  auto pp_of = [T, S, R](int w) { return (int)(w / (T * S * R)); };
  const int slice = (int)(T * S * R);  // ranks per pipeline stage
  auto group = [&](const std::function<int(int)>& color, const std::function<int(int)>& key,
                   const std::string& name) -> PG {
    if (fake) {
      std::vector<std::pair<int, int>> m;
      for (int w = 0; w < world; ++w)
        if (color(w) == color(rank)) m.emplace_back(key(w), w);
      std::sort(m.begin(), m.end());
      std::vector<int> members;
      int me = 0;
      for (size_t i = 0; i < m.size(); ++i) {
        if (m[i].second == rank) me = (int)i;
        members.push_back(m[i].second);
      }
      return ProcessGroup::fake(me, std::move(members), name);
    }
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, color(rank), key(rank), &c);
    auto pg = std::make_shared<ProcessGroup>(c, name);
    MPI_Comm_free(&c);
    return pg;
  };
  auto ident = [](int w) { return w; };
  world_pg = group([](int) { return 0; }, ident, "world");
  // within a stage's slice of the world, as without pp (colors offset by the stage)
  tp = group([&](int w) { return pp_of(w) * slice + repl_of(w) * (int)S + shard_of(w); }, tp_of, "tp");
  dp_shard = group([&](int w) { return pp_of(w) * slice + repl_of(w) * (int)T + tp_of(w); }, shard_of, "dp_shard");
  dp_replicate =
      group([&](int w) { return pp_of(w) * slice + shard_of(w) * (int)T + tp_of(w); }, repl_of, "dp_replicate");
  dp = group([&](int w) { return pp_of(w) * slice + tp_of(w); }, [&](int w) { return repl_of(w) * (int)S + shard_of(w); },
             "dp");
  pp = group([slice](int w) { return w % slice; }, pp_of, "pp");
  pp_p2p = group([slice](int w) { return w % slice; }, pp_of, "pp_p2p");
}

std::string DeviceMesh::describe() const {
  return "world " + std::to_string(world) + " = " +
         (degrees.pp > 1 ? "pp " + std::to_string(degrees.pp) + " x " : std::string()) + "dp_replicate " +
         std::to_string(degrees.dp_replicate) +
         " x dp_shard " + std::to_string(degrees.dp_shard) + " x tp " + std::to_string(degrees.tp);
}

}  // namespace titan::comms
