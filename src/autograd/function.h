// src/autograd/function.h — recording differentiable ops.
//
// Every op (built-in or custom) is a forward computed without graph plus a
// hand-written backward, tied together by `record`. Saved tensors must be
// passed through `saved()` (a detached alias) so a node never owns its own
// outputs' graph (no reference cycles).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "src/autograd/grad_mode.h"
#include "src/autograd/node.h"

namespace titan::autograd {

inline Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

bool any_requires_grad(const std::vector<Tensor>& inputs);

// If grad mode is on and an input requires grad, attaches a node named `name`
// to `outputs` whose backward is `fn`. Returns `outputs`.
std::vector<Tensor> record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                           BackwardFn fn);
Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor output, BackwardFn fn);

// A custom differentiable op: `forward` runs without graph on the inputs;
// `backward` maps output grads to input grads. This is how the collective
// ops (copy-to-tp / reduce-from-tp, all-gather / reduce-scatter) are built.
using ForwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
std::vector<Tensor> custom_op(const std::string& name, const std::vector<Tensor>& inputs, const ForwardFn& forward,
                              BackwardFn backward);

}  // namespace titan::autograd
