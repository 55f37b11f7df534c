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
std::vector<Tensor> checkpoint(const BlockFn& fn, const std::vector<Tensor>& inputs);

// Module backward hook: returns `inputs` passed through an identity op whose
// backward calls `done` once the gradients w.r.t. these inputs are complete,
// i.e. once every op of the module run on them has finished its backward
// (so its parameters' gradients are final). Fires even when no input
// requires grad.
std::vector<Tensor> on_backward_done(const std::vector<Tensor>& inputs, std::function<void()> done);

}  // namespace titan::autograd
