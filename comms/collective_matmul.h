// comms/collective_matmul.h — a sequence-parallel linear fused with its collective (async tensor parallel).
//
// Under sequence parallel a column-parallel projection reads the block input gathered over the sequence, and a
// row-parallel one's partial output is reduce-scattered back to sequence shards. Run as two steps, the GEMM waits
// for the whole collective. Fused (Megatron-LM's --tp-comm-overlap, TorchTitan's
// parallelism.enable_async_tensor_parallel: PyTorch's fused_all_gather_matmul / fused_matmul_reduce_scatter), the
// collective runs as a ring of tp - 1 neighbour exchanges over `p2p` and each step's GEMM on the shard at hand runs
// while the next shard travels. The values are the unfused ops' (the same GEMMs on the same rows; the wire's
// rounding per hop as the unfused collective's); only the order of the reduction's sums is the ring's.
//
// Both are differentiable and adjoint to each other: the backward of the gather + GEMMs is a ring reduce-scatter
// of the input gradient whose steps overlap the data-gradient GEMMs (the weight gradients, one GEMM each over the
// whole gathered input, between the steps); the backward of the GEMM + reduce-scatter is a ring all-gather of the
// output gradient whose steps overlap the data-gradient GEMMs.
//
// Shapes (p = the group's size, s = S / p the rank's sequence shard; equal shards):
//   all_gather_linear:     x [B, s, H] (this rank's rows of the sequence), ws[i] [N_i, H], bs[i] [N_i] or undefined
//                          -> {x_full [B, S, H] (no graph: the gathered input, for readers of its shape), y_i [B, S, N_i]}
//   linear_reduce_scatter: x [B, S, K], w [N, K] -> y [B, s, N] (this rank's rows of the summed x w^T; no bias:
//                          the caller adds one once)
// A meta tensor plans: the exchanges are recorded as the point-to-point transfers they are, the GEMMs per shard
// (FP8 ones as FP8 GEMMs, with their casts and amax all-reduces).
#pragma once
#include <vector>

#include "comms/process_group.h"
#include "src/ops/float8.h"

namespace titan::comms {

// The ring's group: the tensor-parallel ranks on a communicator of their own (DeviceMesh::tp_p2p), its rank
// order the ring's.
// f8[i] / f8: a projection whose GEMMs run in FP8 (nn::Linear::float8, cut by the tensor-parallel plan: its `tp`
// set), null for one in high precision: each operand cast as float8_linear casts it on the unfused op's tensors
// (the gathered input, the gathered output gradient), with the scales of the whole tensor (a tensorwise scale of
// rows that arrive a shard at a time: the group's amax, all-reduced once before the ring). float32 tensors only.
std::vector<Tensor> all_gather_linear(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs,
                                      const PG& p2p, const std::vector<const Float8Casts*>& f8 = {});
Tensor linear_reduce_scatter(const Tensor& x, const Tensor& w, const PG& p2p, const Float8Casts* f8 = nullptr);

}  // namespace titan::comms
