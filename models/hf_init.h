// models/hf_init.h — Hugging Face's initialization of a decoder (what every
// model of the family uses): normal(0, 0.02) for linears, embeddings, experts
// and sinks, zeros for biases, ones for norm weights (as each parameter's module
// declared it: nn::ParamInit), drawn in parameter order from one generator;
// progress on big models.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/nn/module.h"
#include "src/tensor/tensor.h"

namespace titan {

void hf_init_weights(const std::vector<std::pair<std::string, Tensor*>>& named_params,
                     const std::vector<nn::ParamInit>& inits, uint64_t seed);

}  // namespace titan
