#include "comms/device_mesh.h"

#include <mpi.h>

#include <algorithm>
#include <functional>

#include "comms/hosts.h"

namespace titan::comms {

void MeshDegrees::check_sequence_length(int64_t S, bool sequence_parallel, const std::string& key) const {
  const MeshDegrees& d = *this;
  TITAN_CHECK(S > 0, "config error: ", key, " must be > 0, got ", S);
  if (d.cp > 1)
    TITAN_CHECK(S % (2 * d.cp) == 0, "config error: ", key, " (", S, ") must be divisible by 2 x context_parallel_degree = ",
                2 * d.cp, " (each sequence is cut into 2 x cp chunks, two per rank); e.g. ",
                (S / (2 * d.cp) + 1) * 2 * d.cp);
  const int64_t local = S / d.cp;
  const bool sp = d.tp > 1 && sequence_parallel;
  TITAN_CHECK(!sp || local % d.tp == 0, "config error: ", key, " (", S, ")",
              d.cp > 1 ? " / context_parallel_degree (" + std::to_string(d.cp) + ") = " + std::to_string(local) : std::string(),
              " must be divisible by tensor_parallel_degree (", d.tp,
              ") with sequence parallel (or set parallelism.enable_sequence_parallel: false)");
}

MeshDegrees resolve_degrees(MeshDegrees d, int64_t world) {
  auto bad = [&](const std::string& why, const std::string& fix) {
    fail("config error: parallelism: ", why, " (pipeline_parallel_degree ", d.pp, ", data_parallel_replicate_degree ",
         d.dp_replicate, ", data_parallel_shard_degree ", d.dp_shard, ", context_parallel_degree ", d.cp,
         ", tensor_parallel_degree ", d.tp, ", world size ", world, world > 1 ? " from mpirun -np" : "", "); ", fix);
  };
  if (d.pp < 1 || d.dp_replicate < 1 || d.tp < 1 || d.cp < 1 || (d.dp_shard < 1 && d.dp_shard != -1))
    bad("degrees must be >= 1 (or -1 for dp_shard)",
        "set each parallelism.*_degree to 1 or more (data_parallel_shard_degree: -1 takes the ranks left over)");
  const int64_t fixed = d.pp * d.dp_replicate * d.cp * d.tp;
  const std::string np = "mpirun -np ";
  if (d.dp_shard == -1) {
    if (world % fixed != 0)
      bad("the world size is not divisible by pp x dp_replicate x cp x tp = " + std::to_string(fixed),
          "launch with `" + np + std::to_string(fixed * ((world + fixed - 1) / fixed)) + "` (a multiple of " +
              std::to_string(fixed) + "), or change the degrees");
    d.dp_shard = world / fixed;
  }
  if (fixed * d.dp_shard != world)
    bad("pp x dp_replicate x dp_shard x cp x tp = " + std::to_string(fixed * d.dp_shard) +
            " does not equal the world size",
        "launch with `" + np + std::to_string(fixed * d.dp_shard) + "`" +
            (world % fixed == 0 ? ", or set parallelism.data_parallel_shard_degree: -1 (the ranks left over: " +
                                      std::to_string(world / fixed) + ")"
                                : std::string()));
  return d;
}

DeviceMesh::DeviceMesh(MeshDegrees d, bool fake, int fake_rank, int fake_world, std::vector<int> fake_hosts) {
  fake_ = fake;
  world = fake ? fake_world : world_size();
  rank = fake ? fake_rank : world_rank();
  degrees = resolve_degrees(d, world);
  const int64_t S = degrees.dp_shard, T = degrees.tp, R = degrees.dp_replicate, C = degrees.cp;
  // The mesh's coordinates are those of a rank's position, not of its world rank: positions put each host's
  // ranks side by side (hosts(): MPI's nodes), so tp, cp and dp_shard, the inner dimensions, stay within a
  // host whichever way mpirun numbered the ranks. A fake mesh: on the hosts it is given (default one).
  if (fake && fake_hosts.empty()) fake_hosts.assign(world, 0);
  TITAN_CHECK(!fake || (int)fake_hosts.size() == world, "DeviceMesh: fake_hosts lists ", fake_hosts.size(),
              " ranks for a world of ", world);
  host_of = fake ? fake_hosts : hosts().host_of;
  if ((int)host_of.size() != world) host_of.assign(world, 0);  // before MPI starts: one host
  order = host_major_order(host_of);
  std::vector<int> pos_of(world);
  for (int p = 0; p < world; ++p) pos_of[order[p]] = p;
  position = pos_of[rank];
  // Each group: the world ranks of equal color, ordered by key (colors and keys are functions of a position,
  // so a fake mesh lists every group's members without communicating).
  auto tp_of = [T](int p) { return (int)(p % T); };
  auto cp_of = [T, C](int p) { return (int)((p / T) % C); };
  auto shard_of = [T, C, S](int p) { return (int)((p / (T * C)) % S); };
  auto repl_of = [T, C, S, R](int p) { return (int)((p / (T * C * S)) % R); };
  auto pp_of = [T, C, S, R](int p) { return (int)(p / (T * C * S * R)); };
  tp_rank = tp_of(position);
  cp_rank = cp_of(position);
  shard_rank = shard_of(position);
  replicate_rank = repl_of(position);
  pp_rank = pp_of(position);
  const int slice = (int)(T * C * S * R);  // ranks per pipeline stage
  auto group = [&](const std::function<int(int)>& color_of, const std::function<int(int)>& key_of,
                   const std::string& name) -> PG {
    auto color = [&](int w) { return color_of(pos_of[w]); };
    auto key = [&](int w) { return key_of(pos_of[w]); };
    if (fake) {
      std::vector<std::pair<int, int>> m;
      const int mine = color(rank);
      for (int w = 0; w < world; ++w)
        if (color(w) == mine) m.emplace_back(key(w), w);
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
  world_pg = group([](int) { return 0; }, [&](int p) { return order[p]; }, "world");  // by world rank
  // within a stage's slice of the world, as without pp (colors: the other coordinates, offset by the stage)
  auto color = [&](bool rep, bool shard, bool c, bool t) {
    return [=](int p) {
      int x = pp_of(p);
      x = x * (int)R + (rep ? repl_of(p) : 0);
      x = x * (int)S + (shard ? shard_of(p) : 0);
      x = x * (int)C + (c ? cp_of(p) : 0);
      return x * (int)T + (t ? tp_of(p) : 0);
    };
  };
  tp = group(color(true, true, true, false), tp_of, "tp");
  cp = group(color(true, true, false, true), cp_of, "cp");
  cp_p2p = C == 1 ? cp : group(color(true, true, false, true), cp_of, "cp_p2p");
  dp_shard = group(color(true, false, true, true), shard_of, "dp_shard");
  dp_shard_cp = C == 1 ? dp_shard
                       : group(color(true, false, false, true), [&](int p) { return shard_of(p) * (int)C + cp_of(p); },
                               "dp_shard_cp");
  dp_replicate = group(color(false, true, true, true), repl_of, "dp_replicate");
  dp = group(color(false, false, true, true), [&](int p) { return repl_of(p) * (int)S + shard_of(p); }, "dp");
  pp = group([slice](int p) { return p % slice; }, pp_of, "pp");
  pp_p2p = group([slice](int p) { return p % slice; }, pp_of, "pp_p2p");
}

std::string DeviceMesh::describe() const {
  return "world " + std::to_string(world) + " = " +
         (degrees.pp > 1 ? "pp " + std::to_string(degrees.pp) + " x " : std::string()) + "dp_replicate " +
         std::to_string(degrees.dp_replicate) + " x dp_shard " + std::to_string(degrees.dp_shard) +
         (degrees.cp > 1 ? " x cp " + std::to_string(degrees.cp) : std::string()) + " x tp " +
         std::to_string(degrees.tp) + over_hosts();
}

std::string DeviceMesh::over_hosts() const {
  const Hosts& h = hosts();
  if (fake_ || h.count() <= 1 || (int)h.host_of.size() != world) return "";
  std::string s = " over " + std::to_string(h.count()) + " hosts";
  if (h.count() > 16) return s;  // the list would outgrow the line
  s += " (";
  for (int i = 0; i < h.count(); ++i) {  // "h1: ranks 0-3; h2: ranks 4-7" (runs of consecutive ranks)
    s += (i ? "; " : "") + h.name[i] + ": ranks ";
    bool first = true;
    for (int w = 0; w < world; ++w) {
      if (h.host_of[w] != i) continue;
      int e = w;
      while (e + 1 < world && h.host_of[e + 1] == i) ++e;
      s += (first ? "" : ",") + std::to_string(w) + (e > w ? "-" + std::to_string(e) : std::string());
      first = false;
      w = e;
    }
  }
  return s + ")";
}

}  // namespace titan::comms
