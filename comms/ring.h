#pragma once
// Ring collectives over MPI point-to-point, as NCCL's ring runs them: a reduce-scatter in p - 1 steps, each rank
// sending one chunk to its right neighbour while it receives another from its left and adds it into its own; an
// all-gather passing the chunks on the same way; an all-reduce is the two. Open MPI's nonblocking reduce-scatter
// (libnbc, the only one it offers) reduces the whole buffer towards one rank and scatters it back: on two ranks
// sharing this machine a 4 MB reduce-scatter took 0.72 ms against 0.28 ms for the exchange and add below, and a
// 16 MB one 74-94 ms against 1.8-2.9 ms (titan-bench-collectives; docs/simulator.md, "Titan's collectives"). The
// simulator prices a reduce-scatter as this ring (or halving-doubling, the same traffic on a power of two): the
// step that runs is the step that is priced. ProcessGroup runs every reduce-scatter, and every all-reduce of 1 MiB
// or more, as these rings, on one host or across hosts alike (process_group.cpp, kRingAllReduceBytes, says why).
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "src/tensor/dtype.h"

namespace titan::comms::detail {

// dst[i] = own[i] (op) in[i] for n elements; dst may be in (in place).
using Combine = void (*)(const void* own, const void* in, void* dst, int64_t n);
// The sum (max = false) or the maximum of dtype t's elements; a BF16 tensor holds bf16 bits, summed as NCCL
// sums bf16 (each addition in float32, rounded to bf16). Fails naming the dtype where there is none.
Combine combine_for(DType t, bool max);

// Completes n nonblocking requests (the communication thread's polling).
using Complete = std::function<void(MPI_Request* reqs, int n)>;

// in: every rank's chunk, rank after rank (counts[q] elements of esize bytes for rank q); out: this rank's chunk
// reduced over the ranks of comm. scratch: at least 2 x max(counts) elements (1 x on two ranks), not aliasing
// in or out. comm carries nothing else at the time (a communicator of its own): the steps' messages match by
// order. Every element of chunk q is a left fold starting at rank q + 1 and going round the ring.
void ring_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, size_t esize,
                         MPI_Datatype type, Combine combine, void* scratch, MPI_Comm comm, const Complete& complete);

// buf holds every rank's chunk, rank after rank (counts as above); this rank's chunk in place is passed round
// the ring until every rank holds all of them (p - 1 steps).
void ring_all_gather(void* buf, const std::vector<int64_t>& counts, size_t esize, MPI_Datatype type, MPI_Comm comm,
                     const Complete& complete);

}  // namespace titan::comms::detail
