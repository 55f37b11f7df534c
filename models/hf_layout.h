// models/hf_layout.h — a model's tensors as Hugging Face's class names them.
//
// titan keeps every tensor of a layer as one parameter (the experts stacked,
// [E, in, out]); an HF class may cut them differently (Qwen3-MoE: one
// nn.Linear per expert, [out, in]). The layout maps a rank's parameter
// regions (any parallel layout: each a box of the logical tensor) to regions
// of the HF tensors, backed by copies where the element order differs; after a
// load, `after_load` writes the copies back into the parameters. Exports,
// imports and gradient dumps all go through it.
#pragma once
#include <deque>
#include <functional>
#include <vector>

#include "src/checkpoint/checkpoint.h"

namespace titan {

struct HfLayout {
  std::vector<Region> regions;
  std::deque<Tensor> copies;                  // the HF-ordered copies the regions point into
  std::vector<std::function<void()>> writes;  // copies -> parameters
  void after_load() const {
    for (auto& w : writes) w();
  }
};

// The identity: HF's tensors are titan's.
HfLayout same_layout(const std::vector<Region>& params);
// Stacked experts [E, in, out] named <prefix>experts.<proj> become per-expert
// linears <prefix>experts.<e>.<proj>.weight [out, in] (HF's Qwen3-MoE).
HfLayout per_expert_layout(const std::vector<Region>& params);

}  // namespace titan
