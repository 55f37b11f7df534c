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

Norm::Norm(int64_t dim, NormKind kind, double eps_, double offset)
    : layernorm(kind == NormKind::layernorm), eps(eps_), weight_offset(offset) {
  register_parameter("weight", weight, new_parameter({dim}), offset == 0.0 ? ParamInit::ones : ParamInit::zeros);
  if (layernorm) register_parameter("bias", bias, new_parameter({dim}), ParamInit::zeros);
}

Tensor Norm::scale() const { return weight_offset == 0.0 ? weight : add(weight, weight_offset); }

Tensor Norm::forward(const Tensor& x) const {
  return layernorm ? layer_norm(x, scale(), bias, eps) : rms_norm(x, scale(), eps);
}

}  // namespace titan::nn
