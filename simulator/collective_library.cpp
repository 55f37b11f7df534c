#include "simulator/collective_library.h"

#include <algorithm>

namespace titan::sim {

namespace {
// NCCL's tuning constants (src/graph/tuning.cc @01afd20), microseconds; protocols LL, LL128, Simple.
constexpr const char* kProto[3] = {"LL", "LL128", "Simple"};
constexpr double kRingBase[3] = {3.6, 10.0, 8.4};
constexpr double kTreeBase[3] = {4.4, 4.4, 0.0};
constexpr double kRingNvlink[3] = {0.47, 1.9, 3.4};  // per intra-node step (NVLink)
constexpr double kRingNet[3] = {2.7, 4.0, 9.6};      // per inter-node step
constexpr double kTreeNvlink[3] = {0.52, 1.2, 28};
constexpr double kTreeNet[3] = {5.0, 8.5, 50};
// Two algorithms of later releases (their constants as NCCL 2.30.7 has them, @5067397c): NVLS (2.17: NVLink SHARP,
// all-reduce inside a node; Simple) and PAT (2.23: all-gather / reduce-scatter with one rank per node; Simple)
constexpr double kNvlsNvlink = 25.0;               // NVLS's whole latency inside a node (base 0)
constexpr double kPatBase = 8.0, kPatNetStep = 4.0;  // PAT: base; per log2(nodes) (its network latency 14 / 3.5)
constexpr double kPatPerRank = 2.8;                // PAT's linear part, per rank

int log2i(int n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}
}  // namespace

LibraryChoice nccl_choice(Collective kind, int ranks, int nodes, double transfer_s, double nvls_transfer_s) {
  const bool all_reduce = kind == Collective::AllReduce;
  LibraryChoice best;
  double best_t = 1e300;
  const int steps = all_reduce ? 2 * (ranks - 1) : ranks - 1;
  const int inter = all_reduce ? 2 * (nodes - 1) : nodes - 1;
  for (int p = 0; p < 3; ++p) {
    // ring: the protocol's share of the link rate (LL: 8 of every 16 bytes are flags, and it runs at 1/4 off a
    // node or in an all-reduce; LL128: 120 of 128 bytes, 0.7 where a node holds fewer than 2 of the ranks (each
    // rank's NIC both sends and receives: tuning.cc's ppn < 2))
    {
      const bool ppn_below_2 = ranks < 2 * nodes;
      const double bw = p == 0 ? (nodes > 1 || all_reduce ? 0.25 : 1.0 / 3.0) : p == 1 ? (ppn_below_2 ? 0.7 : 0.92) : 1.0;
      const double intra_lat = kRingNvlink[p] * (nodes > 1 && p == 0 ? 1.8 : 1.0);
      const double lat = (kRingBase[p] + (steps - inter) * intra_lat + inter * kRingNet[p]) * 1e-6;
      const double t = lat + transfer_s / bw;
      if (t < best_t) best_t = t, best = {std::string("ring/") + kProto[p], lat, bw};
    }
    if (all_reduce) {  // tree: all-reduce only, every protocol
      // its bus rate 0.9 of the ring's (x the protocol's share), converted to the algorithm's rate at 1/2 where
      // the ring's is n / (2 (n - 1)): (n - 1) / n of the ring's rate besides (tuning.cc: `ratio`)
      const double bw = 0.9 * (p == 0 ? 1.0 / 3.8 : p == 1 ? (nodes == 1 ? 7.0 / 9.0 : 0.915) : 1.0) *
                        (ranks - 1.0) / ranks;
      const double intra_lat = kTreeNvlink[p] * (nodes > 1 && p == 0 ? 1.8 : 1.0);
      const double lat =
          (kTreeBase[p] + 2 * ((ranks / std::max(1, nodes) - 1) * intra_lat + log2i(nodes) * kTreeNet[p])) * 1e-6;
      const double t = lat + transfer_s / bw;
      if (t < best_t) best_t = t, best = {std::string("tree/") + kProto[p], lat, bw};
    }
  }
  auto consider = [&](const char* alg, double lat_us, double bw) {
    const double t = lat_us * 1e-6 + transfer_s / bw;
    if (t < best_t) best_t = t, best = {std::string(alg) + "/Simple", lat_us * 1e-6, bw};
  };
  // PAT: one rank per node, its bus rate 0.75 of the ring's and not converted to the algorithm's as the ring's is
  // (x n / (n - 1)): 0.75 (n - 1) / n of the ring's rate
  if (!all_reduce && nodes > 1 && ranks == nodes)
    consider("pat", kPatBase + log2i(nodes) * kPatNetStep + ranks * kPatPerRank, 0.75 * (ranks - 1) / ranks);
  if (all_reduce && nvls_transfer_s > 0)  // NVLS: the switch reduces and multicasts
    consider("nvls", kNvlsNvlink, transfer_s / nvls_transfer_s);
  return best;
}

}  // namespace titan::sim
