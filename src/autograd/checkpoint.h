// src/autograd/checkpoint.h — activation checkpointing as a recompute op.
//
// checkpoint(fn, inputs) runs fn without recording its graph (so none of its
// activations are kept; only `inputs` are saved). In backward, fn is run
// again with grad on, from detached copies of the inputs, and an inner
// backward pushes the incoming gradients through it: parameters used by fn
// get their gradients there, inputs' gradients flow on to the outer graph.
// The inner graph runs the same kernels in the same order, so gradients are
// bit-identical to the plain run.
#pragma once
#include <functional>
#include <vector>

#include "src/tensor/tensor.h"

namespace titan::autograd {

using BlockFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// What a checkpointed block keeps from its first run.
//  - None: nothing but its inputs; the recompute runs every kernel again.
//  - TorchTitanOps: TorchTitan's op-level selective checkpointing (selective_ac_option "op"): the outputs
//    of the ops of its save list — matmuls (aten.mm) except every second one, attention, tensor-parallel
//    reduce-scatters — are kept from the first run; the recompute takes them instead of running those
//    kernels (or collectives) and recomputes the rest. A float8 GEMM (torchao's torch._scaled_mm) is not on
//    that list (TorchTitan's _save_list of 2024-2026, before its March 2026 rewrite to PyTorch's
//    compute-intensive op list) nor counted among its matmuls: it is recomputed, casts and all. The kept
//    outputs are exactly what the recompute would produce, so gradients stay bit-identical.
enum class SavePolicy { None, TorchTitanOps };
std::vector<Tensor> checkpoint(const BlockFn& fn, const std::vector<Tensor>& inputs,
                               SavePolicy policy = SavePolicy::None);

// The ops of the save list run their forward kernel through this (outside a TorchTitanOps block it just
// runs `kernel`). In a block's first run it keeps the outputs the policy saves; in its recompute it
// returns them (fresh aliases) without running `kernel`. The op records its graph node on the result as
// usual, so gradients reach its inputs.
enum class SacOp { Matmul, ScaledMatmul, Attention, ReduceScatter };  // ScaledMatmul: a float8 GEMM (never kept)
std::vector<Tensor> sac_forward(SacOp op, const std::function<std::vector<Tensor>()>& kernel);
inline Tensor sac_forward(SacOp op, const std::function<Tensor()>& kernel) {
  return sac_forward(op, [&] { return std::vector<Tensor>{kernel()}; })[0];
}

// A fused op of n matmuls (async tensor parallel's gather + projections, comms/collective_matmul.h) under the same
// policy as its n unfused matmuls: their outputs kept or not as n sac_forward(Matmul) calls would decide (those
// `scaled` marks, float8 ones, as sac_forward(ScaledMatmul): never kept, not counted), or all kept when `reduced`
// (the op ends in a reduce-scatter, which the save list keeps); the matmul count moves as those calls' would.
// kernel(need) runs in every run (what else it does, e.g. a gather the backward reads, runs again) and computes
// the outputs `need` marks — every one in a first run or outside a TorchTitanOps block, in a recompute those not
// kept — leaving the others undefined; a recompute returns the kept ones in their place.
std::vector<Tensor> sac_forward_matmuls(size_t n, bool reduced,
                                        const std::function<std::vector<Tensor>(const std::vector<bool>& need)>& kernel,
                                        const std::vector<bool>& scaled = {});

// True while a checkpointed block re-runs its forward inside the backward (the recompute): hooks that
// prepare a forward's own backward (e.g. freeing what the backward gathers again) leave it alone, since
// its backward follows at once.
bool recomputing();

// Module backward hook: returns `inputs` passed through an identity op whose
// backward calls `done` once the gradients w.r.t. these inputs are complete,
// i.e. once every op of the module run on them has finished its backward
// (so its parameters' gradients are final). Fires even when no input
// requires grad.
std::vector<Tensor> on_backward_done(const std::vector<Tensor>& inputs, std::function<void()> done);

}  // namespace titan::autograd
