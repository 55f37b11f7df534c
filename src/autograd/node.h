// src/autograd/node.h — one recorded op in the backward graph.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/tensor/tensor.h"

namespace titan::autograd {

struct Node;

// Where the gradient of one op input goes: into another node's output slot,
// or into a leaf's .grad; neither when that input needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
  std::shared_ptr<TensorImpl> leaf;
  bool valid() const { return fn || leaf; }
};

// grads_out has one (defined) tensor per forward output; returns one gradient
// per forward input (undefined = no gradient for that input).
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads_out)>;

struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

struct Node {
  std::string name;
  uint64_t seq = 0;  // creation order: the backward walk runs higher seq first
  std::vector<Edge> next;
  std::vector<OutputMeta> outputs;
  BackwardFn backward;  // reset after it runs unless the graph is retained
  bool released = false;
};

uint64_t next_sequence_number();

}  // namespace titan::autograd
