#include "comms/hosts.h"

#include <mpi.h>

#include <algorithm>
#include <numeric>

#include "comms/process_group.h"

namespace titan::comms {

namespace {
Hosts g_hosts;
bool g_found = false;
}  // namespace

void discover_hosts() {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // a host is a set of ranks that can share memory (MPI's node); its number: its lowest world rank, ranked
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int lowest = rank, local = 0;
  MPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  char me[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(me, &len);
  std::vector<int> lowest_of(world), local_of(world);
  std::vector<char> names((size_t)world * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(&lowest, 1, MPI_INT, lowest_of.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&local, 1, MPI_INT, local_of.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  Hosts h;
  h.host_of.resize(world);
  h.local_rank = local_of;
  std::vector<int> leaders = lowest_of;
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  for (int w = 0; w < world; ++w)
    h.host_of[w] = (int)(std::lower_bound(leaders.begin(), leaders.end(), lowest_of[w]) - leaders.begin());
  for (int l : leaders) h.name.emplace_back(&names[(size_t)l * MPI_MAX_PROCESSOR_NAME]);
  g_hosts = std::move(h);
  g_found = true;
}

const Hosts& hosts() {
  if (!g_found) {  // before MPI starts (or without it): one host, set once
    static const Hosts one = [] {
      Hosts h;
      const int w = world_size();
      h.host_of.assign(w, 0);
      h.local_rank.resize(w);
      std::iota(h.local_rank.begin(), h.local_rank.end(), 0);
      h.name = {"localhost"};
      return h;
    }();
    return one;
  }
  return g_hosts;
}

std::string rank_where(int r) {
  const Hosts& h = hosts();
  if (h.count() <= 1 || r < 0 || r >= (int)h.host_of.size()) return "rank " + std::to_string(r);
  return "rank " + std::to_string(r) + " on " + h.name[h.host_of[r]];
}

std::vector<int> host_major_order(const std::vector<int>& host_of) {
  std::vector<int> order(host_of.size());
  std::iota(order.begin(), order.end(), 0);
  // hosts are numbered by their lowest rank, so host index order is first-appearance order
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return host_of[a] < host_of[b]; });
  return order;
}

}  // namespace titan::comms
