// src/autograd/engine.h — reverse mode.
//
// The walk is non-recursive and deterministic: among ready nodes the one
// created last runs first (ties cannot happen: creation numbers are unique),
// so every rank issues the collectives inside backward in the same order.
// A leaf's grad-ready hooks fire once all its contributions in this pass are
// accumulated. Gradients are computed under no-grad (no double backward).
#pragma once
#include <functional>
#include <vector>

#include "src/autograd/node.h"

namespace titan::autograd {

// roots[i] receives grads[i] (undefined = ones, roots[i] must be a scalar).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// The names of the nodes in the order a backward from `root` would run them
// (for tests and debugging; runs nothing).
std::vector<std::string> backward_order(const Tensor& root);

}  // namespace titan::autograd
