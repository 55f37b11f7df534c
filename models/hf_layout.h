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
#include <string>
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
// How an HF class names a MoE layer's tensors: the module (titan's `mlp`) and the experts' projections.
struct ExpertNames {
  std::string module = "mlp";  // Qwen3-MoE: mlp; Mixtral: block_sparse_moe
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // Mixtral: w1, w3, w2
  // the router's selection biases (titan's <prefix>.mlp.expert_bias buffer) under the class's name, relative to
  // the module ("": titan's name; DeepSeek-V3: gate.e_score_correction_bias)
  std::string route_bias;
};
// Stacked experts [E, in, out] named <prefix>.mlp.experts.<proj> become per-expert linears
// <prefix>.<module>.experts.<e>.<hf proj>.weight [out, in] (HF's Qwen3-MoE, Mixtral); the router
// (<prefix>.mlp.gate.*) is renamed with its module.
HfLayout per_expert_layout(const std::vector<Region>& params, const ExpertNames& hf = {});
// Stacked experts kept stacked, their gate and up as the two halves of one [E, in, 2 out] tensor
// <prefix>.<module>.experts.<fused> (Llama 4's gate_up_proj: gate first): each parameter's block (any plan's)
// lands at its offset in its half, so one HF tensor comes in two blocks of a rank (the writers take that). Every
// layer's `mlp` is renamed to `module`, its router `mlp.gate` to `<module>.<router>`.
struct FusedExpertNames {
  std::string module = "feed_forward", fused = "gate_up_proj", router = "router";
};
HfLayout fused_halves_layout(const std::vector<Region>& params, const FusedExpertNames& hf = {});

}  // namespace titan
