// src/nn/layer_list.h — a numbered list of blocks ("layers.0", "layers.1", ...)
// and the forward walk over it that the decoder models share: each block's
// pre-hook runs inside its (optionally checkpointed) body, so a recompute
// re-runs it; its post-hook outside.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "src/autograd/checkpoint.h"
#include "src/nn/module.h"

namespace titan::nn {

template <typename Block>
class LayerList : public Module {
 public:
  std::vector<Block*> layers;
  Block& add(std::unique_ptr<Block> l) {
    Block& r = register_module(std::to_string(layers.size()), std::move(l));
    layers.push_back(&r);
    return r;
  }
  // h [B, S, dim] through every block: block->forward(x, inputs); block i
  // is checkpointed when checkpoint_every > 0 and (i + 1) % checkpoint_every == 0
  // (1: every block; 2: every second, as TorchTitan's selective_ac_option "2"), keeping what `policy` saves.
  // Blocks [begin, end) only (end -1: through the last): a pipeline stage's; i stays the block's index.
  template <typename Inputs>
  Tensor run(Tensor h, const Inputs& inputs, int64_t checkpoint_every,
             autograd::SavePolicy policy = autograd::SavePolicy::None, int64_t begin = 0, int64_t end = -1) const {
    const size_t stop = end < 0 ? layers.size() : (size_t)end;
    for (size_t i = (size_t)begin; i < stop; ++i) {
      Block* layer = layers[i];
      auto body = [layer, inputs](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{layer->forward(layer->pre(in[0]), inputs)};
      };
      const bool ckpt = checkpoint_every > 0 && (int64_t)(i + 1) % checkpoint_every == 0;
      h = layer->post(ckpt ? autograd::checkpoint(body, {h}, policy)[0] : body({h})[0]);
    }
    return h;
  }
};

}  // namespace titan::nn
