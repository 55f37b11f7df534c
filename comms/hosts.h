// comms/hosts.h — which host each rank of the job runs on, as MPI sees it (its node: the ranks that can share
// memory), found once when MPI starts (comms::init) and the same on every rank.
//
// Hosts are numbered 0.. in the order of their lowest world rank; a host's name is its MPI processor name
// (the hostname). The mesh lays its dimensions over hosts with `host_major_order`, the watchdog and the
// errors name a rank's host with `rank_where`.
#pragma once
#include <string>
#include <vector>

namespace titan::comms {

struct Hosts {
  std::vector<int> host_of;         // [world] host index of each world rank
  std::vector<std::string> name;    // [hosts] hostname of each host
  std::vector<int> local_rank;      // [world] rank within its host (by world rank)
  int count() const { return (int)name.size(); }
};

// The job's hosts (one host of `world_size()` ranks before MPI starts or without it).
const Hosts& hosts();
// Gathers them over world (collective; comms::init calls it once).
void discover_hosts();

// "rank 5 on h2" (or "rank 5" when the job has one host): what an error says of a rank.
std::string rank_where(int world_rank);

// Mesh position -> world rank, with the ranks of one host at consecutive positions (hosts in the order of
// their lowest rank, ranks within a host by world rank): the mesh's inner dimensions (tp innermost, then cp,
// dp_shard) stay within a host however mpirun numbered the ranks (--map-by slot or node). `host_of` [world].
// The identity when ranks are already host-major (mpirun's default, --map-by slot, with equal slots).
std::vector<int> host_major_order(const std::vector<int>& host_of);

}  // namespace titan::comms
