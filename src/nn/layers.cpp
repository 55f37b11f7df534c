#include "src/nn/layers.h"

namespace titan::nn {

Tensor new_parameter(const Shape& s) {
  MemoryCategoryScope cat(MemoryCategory::Parameters);
  return empty(s);
}

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  register_parameter("weight", weight, new_parameter({out, in}));
  if (has_bias) register_parameter("bias", bias, new_parameter({out}));
}

Embedding::Embedding(int64_t vocab, int64_t dim) { register_parameter("weight", weight, new_parameter({vocab, dim})); }

Norm::Norm(int64_t dim, const std::string& type, double eps_) : layernorm(type == "layernorm"), eps(eps_) {
  TITAN_CHECK(type == "rmsnorm" || type == "layernorm", "Norm: unknown norm type '", type,
              "' (allowed: rmsnorm, layernorm)");
  register_parameter("weight", weight, new_parameter({dim}));
  if (layernorm) register_parameter("bias", bias, new_parameter({dim}));
}

Tensor Norm::forward(const Tensor& x) const {
  return layernorm ? layer_norm(x, weight, bias, eps) : rms_norm(x, weight, eps);
}

}  // namespace titan::nn
