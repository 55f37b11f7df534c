// models/converters.h — model converters (TorchTitan's model.converters): what a built model's layers become
// before any parallel plan sees them.
//
// float8 (the tensor-parallel plan then tells a colwise / rowwise layer's casts its group, Fp8TensorParallel, and
// refuses a converted layer it replicates with summed gradients): every linear layer whose name contains none of
// filter_fqns and whose in and out features are multiples of
// 16 (FP8 tensor cores need them; TorchTitan's module filter skips the others) computes its three GEMMs (output,
// grad_input, grad_weight) in FP8 as the recipe says (src/ops/float8.h; emulated exactly on the CPU, priced at
// the chip's FP8 rate by the simulator). Parameters, optimizer state, checkpoints and exports stay float32;
// the MoE experts' grouped GEMMs are not linear layers: they stay as they are unless moe_fqns names them.
#pragma once
#include <string>
#include <vector>

#include "src/nn/module.h"
#include "src/ops/float8.h"

namespace titan::models {

struct Float8Conversion {
  std::vector<std::string> converted;  // the linear layers' names (HF's module names)
  std::vector<std::string> experts;    // the MoE experts modules converted by moe_fqns (e.g. layers.0.mlp.experts)
  std::vector<std::string> filtered;   // linear layers left in float32 by filter_fqns
  std::vector<std::string> unaligned;  // left in float32: a feature count not a multiple of 16 (e.g. an 8-expert router)
};

// Converts model's linear layers (names as named_modules() gives them; a filter entry matches a name containing
// it, torchao's rule). MX recipes need every converted layer's in and out features to be multiples of 32 (a
// block spans 32 along each GEMM's contraction axis): a layer that is not is refused, naming it, its shape and
// the filter that would leave it in float32.
//
// moe_fqns (float8.moe_fqns_prototype, TorchTitan's key of torchao's float8 MoE training): the MoE experts modules
// whose name contains an entry compute their grouped GEMMs in FP8 as torchao's grouped GEMMs do
// (float8_grouped_linear: rowwise, e4m3, power-of-two scales per token, per expert column / row, per expert's
// tokens in grad_weight; or MXFP8 blocks along the same axes). Refused: tensorwise and rowwise_with_gw_hp, an
// entry that matches no experts module, experts whose dim or hidden size is not a multiple of 16 (MX: 32).
Float8Conversion convert_to_float8(nn::Module& model, Float8Recipe recipe, const std::vector<std::string>& filter_fqns,
                                   const std::vector<std::string>& moe_fqns = {});

}  // namespace titan::models
