// src/nn/module.h — a tree of named parameters.
//
// A module registers pointers to its parameter members under their names
// (Hugging Face's state-dict names when the model is built that way), so a
// parallel plan applied from outside can find a parameter by name and swap
// the tensor in place (e.g. for its FSDP shard) without the model knowing.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/tensor/tensor.h"

namespace titan::nn {

// How a parameter starts (Hugging Face's _init_weights, by what the parameter is, declared by the module
// that owns it): drawn from normal(0, std), or ones (norm weights), or zeros (biases).
enum class ParamInit { normal, ones, zeros };

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Depth-first, in registration order: a deterministic order every rank shares.
  std::vector<std::pair<std::string, Tensor*>> named_parameters(const std::string& prefix = "");
  // The initialization each parameter declared, in named_parameters() order.
  std::vector<ParamInit> parameter_inits();
  std::vector<Tensor*> parameters();
  // This module ("" or `prefix` without its dot) and every descendant, depth-first in registration order, named
  // as named_parameters() names their parameters' owners.
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  int64_t num_parameters();
  void zero_grad();
  // The parameters this module reads only as operands of bf16 GEMMs under bf16 autocast, each rounded to bf16
  // before any use (a bf16 Linear's weight, bf16 experts' weights): a data-parallel plan may gather them in
  // bf16 without changing a bit of the step (FSDP's bf16 all-gather, training.mixed_precision_param). This
  // module's own, not its children's; none by default.
  virtual std::vector<const Tensor*> bf16_operands() const { return {}; }

  // Forward hooks, as PyTorch's: a pre-hook may replace the input, a
  // post-hook the output. This is how parallel plans (FSDP unshard/reshard,
  // tensor-parallel input/output collectives) attach to a model from outside;
  // the model runs its children through call().
  using Hook = std::function<Tensor(Module&, const Tensor&)>;
  void register_forward_pre_hook(Hook h) { pre_hooks_.push_back(std::move(h)); }
  void register_forward_post_hook(Hook h) { post_hooks_.push_back(std::move(h)); }
  Tensor pre(const Tensor& x) {
    Tensor y = x;
    for (auto& h : pre_hooks_) y = h(*this, y);
    return y;
  }
  Tensor post(const Tensor& y) {
    Tensor z = y;
    for (auto& h : post_hooks_) z = h(*this, z);
    return z;
  }
  // The one way a model runs a child: pre-hooks, body(input), post-hooks
  // (e.g. `attn->call(x, [&](const Tensor& a) { return attn->forward(a, inputs); })`).
  template <typename Body>
  Tensor call(const Tensor& x, Body&& body) {
    return post(body(pre(x)));
  }

 protected:
  Tensor& register_parameter(const std::string& name, Tensor& slot, Tensor value, ParamInit init = ParamInit::normal);
  template <typename M>
  M& register_module(const std::string& name, std::unique_ptr<M> m) {
    M& ref = *m;
    children_.emplace_back(name, std::move(m));
    return ref;
  }

 private:
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<ParamInit> inits_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  std::vector<Hook> pre_hooks_, post_hooks_;
};

}  // namespace titan::nn
