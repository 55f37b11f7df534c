#include "src/optim/adamw.h"

#include "src/log/log.h"

#include <algorithm>
#include <cmath>

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"

namespace titan {

AdamW::AdamW(std::vector<std::pair<std::string, Tensor*>> params, AdamWOptions opt) : opt_(opt) {
  MemoryCategoryScope cat(MemoryCategory::OptimizerState);
  int64_t total = 0;
  for (auto& [n, p] : params) total += p->numel();
  Progress progress("allocating AdamW state", std::max<int64_t>(total, 1), "parameters");
  for (auto& [n, p] : params) {
    progress.add(p->numel());
    if (!p->requires_grad()) continue;
    slots_.push_back({n, p, zeros(p->shape(), p->dtype(), p->device()), zeros(p->shape(), p->dtype(), p->device()),
                      p->dim() >= 2});
  }
  progress.finish();
}

void AdamW::step(double lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(opt_.beta1, (double)t_);
  const double bc2 = 1.0 - std::pow(opt_.beta2, (double)t_);
  const float step_size = (float)(lr / bc1);
  const float bc2_sqrt = (float)std::sqrt(bc2);
  const float b1 = (float)opt_.beta1, b2 = (float)opt_.beta2, eps = (float)opt_.eps;
  for (auto& s : slots_) {
    Tensor g = s.param->grad();
    if (!g.defined()) continue;
    // ~12 FLOPs per element; reads p, g, m, v and writes p, m, v
    record_cost("adamw", 12.0 * (double)s.param->numel(), 7.0 * (double)s.param->nbytes(), KernelClass::Optimizer);
    if (s.param->is_meta()) continue;
    TITAN_CHECK(s.param->dtype() == DType::F32 && s.param->is_contiguous(), "AdamW: parameter ", s.name,
                " must be a contiguous float32 tensor");
    Tensor gc = g.contiguous();
    float* p = s.param->data<float>();
    const float* gr = gc.data<float>();
    float* m = s.exp_avg.data<float>();
    float* v = s.exp_avg_sq.data<float>();
    const float decay = s.decay ? (float)(1.0 - lr * opt_.weight_decay) : 1.0f;
    const int64_t n = s.param->numel();
#pragma omp parallel for simd schedule(static) if (n >= (1 << 15))
    for (int64_t i = 0; i < n; ++i) {
      p[i] *= decay;
      m[i] += (gr[i] - m[i]) * (1.0f - b1);
      v[i] = v[i] * b2 + (1.0f - b2) * gr[i] * gr[i];
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      p[i] += -step_size * (m[i] / denom);
    }
  }
}

double squared_norm(const Tensor& t) {
  if (!t.defined() || t.is_meta() || t.numel() == 0) return 0.0;
  Tensor c = t.contiguous();
  const float* x = c.data<float>();
  const int64_t n = c.numel();
  constexpr int64_t kBlock = 1 << 13, kLanes = 8;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> part((size_t)blocks);
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * kBlock, i1 = std::min(n, i0 + kBlock);
    double lane[kLanes] = {};
    int64_t i = i0;
    for (; i + kLanes <= i1; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += (double)x[i + l] * x[i + l];
    for (int64_t l = 0; i + l < i1; ++l) lane[l] += (double)x[i + l] * x[i + l];
    for (int64_t w = kLanes / 2; w >= 1; w /= 2)
      for (int64_t l = 0; l < w; ++l) lane[l] += lane[l + w];
    part[(size_t)b] = lane[0];
  }
  double s = 0;
  for (double v : part) s += v;
  return s;
}

double grad_norm(const std::vector<Tensor*>& params) {
  double total = 0;
  for (auto* p : params) total += squared_norm(p->grad());
  return std::sqrt(total);
}

void clip_grads(const std::vector<Tensor*>& params, double max_norm, double norm) {
  // torch clamps the coefficient to 1 and multiplies regardless (x 1.0 is exact): the step's work does not
  // depend on the norm, so the planned step (which cannot know it) is the step that runs
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  double elems = 0, bytes = 0;
  {
    CostRecordPause one_kernel;  // torch's foreach multiply: one kernel over every gradient, recorded below
    for (auto* p : params) {
      Tensor g = p->grad();
      if (!g.defined()) continue;
      mul_(g, coef);
      elems += (double)g.numel();
      bytes += 2.0 * (double)g.nbytes();
    }
  }
  record_cost("clip_grads", elems, bytes);
}

double LRSchedule::factor(int64_t t) const {
  if (t <= warmup_steps) return (double)t / (double)(warmup_steps + 1);
  const double floor = min_lr_factor;
  auto shape = [&](double progress, bool cosine) {  // 1 -> floor as progress 0 -> 1
    progress = std::min(1.0, std::max(0.0, progress));
    double f = cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
    return floor + (1.0 - floor) * f;
  };
  if (schedule == LRShape::constant) return 1.0;
  const int64_t after = total_steps - warmup_steps;
  if (schedule == LRShape::linear || schedule == LRShape::cosine)
    return shape((double)(t - warmup_steps) / (double)std::max<int64_t>(after, 1), schedule == LRShape::cosine);
  // wsd: stable until the last decay_ratio of the steps, then decay
  const int64_t decay_steps = (int64_t)std::llround(decay_ratio * (double)total_steps);
  const int64_t decay_start = total_steps - decay_steps;
  if (t <= decay_start) return 1.0;
  return shape((double)(t - decay_start) / (double)std::max<int64_t>(decay_steps, 1), decay_type == DecayShape::cosine);
}

}  // namespace titan
