#include "src/nn/module.h"

namespace titan::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor& slot, Tensor value, ParamInit init) {
  slot = std::move(value);
  slot.set_name(name);
  if (is_floating(slot.dtype())) slot.requires_grad_(true);
  params_.emplace_back(name, &slot);
  inits_.push_back(init);
  return slot;
}

std::vector<ParamInit> Module::parameter_inits() {
  std::vector<ParamInit> out = inits_;
  for (auto& [n, c] : children_) {
    auto sub = c->parameter_inits();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  for (auto& [n, c] : children_) {
    auto sub = c->named_parameters(prefix + n + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out = {{prefix, this}};
  for (auto& [n, c] : children_) {
    auto sub = c->named_modules(prefix.empty() ? n : prefix + "." + n);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<Tensor*> Module::parameters() {
  std::vector<Tensor*> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (auto* p : parameters()) n += p->numel();
  return n;
}

void Module::zero_grad() {
  for (auto* p : parameters()) p->zero_grad();
}

}  // namespace titan::nn
