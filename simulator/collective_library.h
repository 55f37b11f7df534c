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
//          collective's latency grows with the rank count as the chosen algorithm says. Two algorithms of later
//          releases, with their constants as NCCL 2.30.7 (@5067397c) has them, both Simple:
//          NVLS (NVLink SHARP, 2.17): an all-reduce inside one NVLink domain whose switch reduces and
//          multicasts (a level's nvls_efficiency): 25 us, and (1 + 1/n) x the bytes each way per rank at that
//          fraction of the level's line rate, where the ring moves 2 (n - 1) / n x them (1.3x the ring's speed
//          on 8 H100, as nccl-tests measure). Not across nodes (NVLSTree is not modelled).
//          PAT (2.23): all-gather / reduce-scatter over ranks one per node: 8 us + 4 us x log2(nodes) + 2.8 us
//          per rank, at 0.75 (n - 1) / n of the ring's rate (lower latency than the ring's network steps at scale).
//          The reduction's operator and type are not known here: NCCL runs NVLS for a Sum (fp32, bf16) or a
//          Min / Max of bf16, not an average (PreMulSum) nor an fp32 Max, and PAT for no averaging
//          reduce-scatter; both are priced as if the collective qualified.
//          The ring and tree constants stay those of @01afd20 (2.7.5); later releases raised the ring's
//          bases (LL 6.6, LL128 14 us) and its network Simple step (14 us) and lowered the tree's Simple ones
//          (4 / 14 us): tried with this change and not kept (docs/simulator.md, "NVLS and PAT").
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
  double bandwidth = 1;    // the transfer's speed against the ring at the links' rate (divides the transfer time)
};

enum class Collective { AllGather, ReduceScatter, AllReduce, AllToAll };

// NCCL's pick for a collective (not AllToAll: cost_model prices that as the generic model does) over `ranks` ranks
// on `nodes` nodes (systems joined by the scale-out network) moving its bytes in `transfer_s` as a ring at the
// links' full rate. `nvls_transfer_s` > 0: the group lies in one NVLink domain whose switch reduces, and an NVLS
// all-reduce would move its bytes in that time.
LibraryChoice nccl_choice(Collective kind, int ranks, int nodes, double transfer_s, double nvls_transfer_s = 0);

}  // namespace titan::sim
