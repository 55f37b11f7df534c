#include "src/nn/layers.h"

namespace titan::nn {

Tensor new_parameter(const Shape& s) {
  MemoryCategoryScope cat(MemoryCategory::Parameters);
  return empty(s);
}

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  register_parameter("weight", weight, new_parameter({out, in}));
  if (has_bias) register_parameter("bias", bias, new_parameter({out}), ParamInit::zeros);
}

Embedding::Embedding(int64_t vocab, int64_t dim) { register_parameter("weight", weight, new_parameter({vocab, dim})); }

Norm::Norm(int64_t dim, NormKind kind, double eps_) : layernorm(kind == NormKind::layernorm), eps(eps_) {
  register_parameter("weight", weight, new_parameter({dim}), ParamInit::ones);
  if (layernorm) register_parameter("bias", bias, new_parameter({dim}), ParamInit::zeros);
}

Tensor Norm::forward(const Tensor& x) const {
  return layernorm ? layer_norm(x, weight, bias, eps) : rms_norm(x, weight, eps);
}

}  // namespace titan::nn
