#include "src/nn/layers.h"

namespace titan::nn {

// Parameters are created uninitialized (on the DeviceScope's device, charged
// to MemoryCategory::Parameters); the model's init_weights fills them.
namespace {
Tensor param(const Shape& s) {
  MemoryCategoryScope cat(MemoryCategory::Parameters);
  return empty(s);
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  register_parameter("weight", weight, param({out, in}));
  if (has_bias) register_parameter("bias", bias, param({out}));
}

Embedding::Embedding(int64_t vocab, int64_t dim) { register_parameter("weight", weight, param({vocab, dim})); }

Norm::Norm(int64_t dim, const std::string& type, double eps_) : layernorm(type == "layernorm"), eps(eps_) {
  TITAN_CHECK(type == "rmsnorm" || type == "layernorm", "Norm: unknown norm type '", type,
              "' (allowed: rmsnorm, layernorm)");
  register_parameter("weight", weight, param({dim}));
  if (layernorm) register_parameter("bias", bias, param({dim}));
}

Tensor Norm::forward(const Tensor& x) const {
  return layernorm ? layer_norm(x, weight, bias, eps) : rms_norm(x, weight, eps);
}

}  // namespace titan::nn
