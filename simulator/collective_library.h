// simulator/collective_library.h — the algorithm and protocol a real collective library picks for one
// collective, and the fixed time it pays for it (latency), as the library's own tuning model computes them.
//
// The transfer itself (bytes over each level's links) is cost_model's hierarchical alpha-beta; a library
// changes how fast a protocol moves those bytes and how many latency steps the chosen algorithm takes:
//
//   nccl   NCCL's tuning model (src/graph/tuning.cc, NVIDIA/nccl @01afd20): for each (algorithm, protocol)
//          it predicts  time = latency + bytes / bandwidth  and runs the fastest. Ring (every collective):
//          (N - nodes) intra-node steps and (nodes - 1) inter-node steps for all-gather / reduce-scatter, twice
//          that for all-reduce; Tree (all-reduce only): 2 ((N/nodes - 1) intra + log2(nodes) inter). Protocols
//          LL / LL128 / Simple trade bandwidth (1/4, 0.92, 1 of the link on a ring) for per-step latency
//          (0.47 / 1.9 / 3.4 us over NVLink, 2.7 / 4.0 / 9.6 us over the network, plus a base of 3.6 / 10.0 /
//          8.4 us): small messages on many ranks take the tree or LL, large ones the ring with Simple, so a
//          collective's latency grows with the rank count as the chosen algorithm says.
//   generic  no library model: each level's latency_us per step of cost_model's per-level algorithm (Trainium's
//          collective engines, MPI on this machine).
#pragma once
#include <array>
#include <string>
#include <string_view>

#include "src/config/enum_names.h"

namespace titan::sim {

enum class CollectiveLibrary { generic, nccl };
constexpr std::array<std::string_view, 2> enum_names(CollectiveLibrary) { return {"generic", "nccl"}; }

struct LibraryChoice {
  std::string algorithm;   // e.g. "ring/LL128"
  double latency_s = 0;    // the fixed part: base + the algorithm's latency steps
  double bandwidth = 1;    // fraction of the links' rate the protocol reaches (divides the transfer time)
};

// NCCL's pick for a collective over `ranks` ranks on `nodes` nodes (systems joined by the scale-out network)
// moving its bytes in `transfer_s` at the links' full rate. all_reduce: true for an all-reduce (ring twice the
// steps; tree allowed), false for all-gather / reduce-scatter / all-to-all.
LibraryChoice nccl_choice(bool all_reduce, int ranks, int nodes, double transfer_s);

}  // namespace titan::sim
