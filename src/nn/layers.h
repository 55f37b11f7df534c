// src/nn/layers.h — the basic parameterized layers shared by the model zoo.
#pragma once
#include <optional>
#include "src/config/enum_names.h"
#include <functional>
#include <string>

#include "src/autograd/autocast.h"
#include "src/nn/module.h"
#include "src/ops/float8.h"
#include "src/ops/ops.h"

namespace titan::nn {

// An uninitialized parameter tensor (on the DeviceScope's device, charged to
// MemoryCategory::Parameters); the model's init_weights fills it.
Tensor new_parameter(const Shape& s);

// y = x W^T (+ b). weight [out, in], bias [out]
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias);
  Tensor forward(const Tensor& x) const {
    if (compute) return compute(*this, x);
    const bool once = bias_scale == 1.0 || !bias.defined();
    const Tensor b = once ? bias : Tensor();
    std::optional<AutocastScope> fp32;
    if (float32) fp32.emplace(DType::F32);
    Tensor y = float8 ? float8_linear(x, weight, b, *float8) : linear(x, weight, b);
    return once ? y : add(y, mul(bias, bias_scale));
  }
  // the weight, unless the layer computes in float32 (an FP8 layer's casts read its bf16 values: float8_weight;
  // the bias is added in float32 on a row-parallel layer's one rank: not listed)
  std::vector<const Tensor*> bf16_operands() const override {
    if (float32) return {};
    return {&weight};
  }
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined
  // 0 on all but one rank of a row-parallel (tensor-parallel) group, whose
  // partial outputs are summed: the bias is added once (its gradient still flows)
  double bias_scale = 1.0;
  // Set by the float8 converter (models/converters.h): the GEMMs run in FP8, each operand cast as the recipe says
  std::optional<Float8Casts> float8;
  // computes in float32 under bf16 autocast (an MoE router, as TorchTitan's)
  bool float32 = false;
  // set by a parallel plan: computes the layer's output in its place (async tensor parallel: the projection fused
  // with its input's all-gather or its output's reduce-scatter, parallel/tensor_parallel.cpp); default x W^T + b
  std::function<Tensor(const Linear&, const Tensor& x)> compute;
};

class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim);
  Tensor forward(const Tensor& ids) const { return lookup ? lookup(weight, ids) : embedding(weight, ids); }
  Tensor weight;  // [vocab, dim] (a vocab-parallel plan: this rank's rows)
  // set by a parallel plan (e.g. the vocab-parallel lookup); default: embedding(weight, ids)
  std::function<Tensor(const Tensor& weight, const Tensor& ids)> lookup;
};

enum class NormKind { rmsnorm, layernorm };
constexpr std::array<std::string_view, 2> enum_names(NormKind) { return {"rmsnorm", "layernorm"}; }

// RMSNorm (weight) or LayerNorm (weight, bias) over the last dim. weight_offset: the norm scales by
// (offset + weight), the weight starting at 0 (Gemma's (1 + weight) norms); 0: by the weight, starting at 1.
class Norm : public Module {
 public:
  Norm(int64_t dim, NormKind kind, double eps, double weight_offset = 0.0);
  Tensor forward(const Tensor& x) const;
  Tensor scale() const;  // what multiplies the normalized x: weight, or offset + weight
  Tensor weight;  // [dim]
  Tensor bias;    // [dim], layernorm only
  bool layernorm;
  double eps;
  double weight_offset;
};

}  // namespace titan::nn
