// src/optim/adamw.h — AdamW (decoupled weight decay), PyTorch's update order:
//   p *= 1 - lr*wd ; m = lerp(m, g, 1-b1) ; v = b2 v + (1-b2) g^2
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// No decay on norms and biases (parameters of rank < 2). Moments are charged
// to MemoryCategory::OptimizerState.
#pragma once
#include <string>
#include <vector>

#include "src/tensor/tensor.h"

namespace titan {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, Tensor*>> params, AdamWOptions opt);
  void step(double lr);  // uses each parameter's .grad(); parameters without a grad are skipped
  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  struct Slot {
    std::string name;
    Tensor* param;
    Tensor exp_avg, exp_avg_sq;
    bool decay;
  };
  std::vector<Slot>& slots() { return slots_; }
  const AdamWOptions& options() const { return opt_; }

 private:
  std::vector<Slot> slots_;
  AdamWOptions opt_;
  int64_t t_ = 0;
};

// Sum of squares of a float32 tensor, in double: fixed blocks of 8,192 elements, each summed in 8 lanes, the
// blocks added in order (vectorized and split across threads, the same value on any thread count); 0 for an
// undefined or meta tensor.
double squared_norm(const Tensor& t);
// Global L2 norm over all gradients (sqrt of the sum of per-tensor squared norms).
double grad_norm(const std::vector<Tensor*>& params);
// Scales every gradient by min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_.
void clip_grads(const std::vector<Tensor*>& params, double max_norm, double norm);

// Learning-rate factor at (1-based) step t: linear warmup then
// constant | linear | cosine decay to min_lr_factor, or warmup-stable-decay.
enum class LRShape { constant, linear, cosine, wsd };
constexpr std::array<std::string_view, 4> enum_names(LRShape) { return {"constant", "linear", "cosine", "wsd"}; }
enum class DecayShape { linear, cosine };
constexpr std::array<std::string_view, 2> enum_names(DecayShape) { return {"linear", "cosine"}; }

struct LRSchedule {
  LRShape schedule = LRShape::wsd;
  DecayShape decay_type = DecayShape::linear;
  int64_t warmup_steps = 0, total_steps = 1;
  double decay_ratio = 0.2, min_lr_factor = 0.0;
  double factor(int64_t t) const;
};

}  // namespace titan
