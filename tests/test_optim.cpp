// The optimizer's floor (src/optim): AdamW's update and gradient clipping against their formulas in double
// (PyTorch's update order, decay only on parameters of rank >= 2), and the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>

#include "src/optim/adamw.h"

using namespace titan;

// ---- AdamW ---------------------------------------------------------------------------
TEST(Optim, AdamWMatchesItsFormulaAndDecaysOnlyMatrices) {
  const std::vector<float> w0 = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f, 3.0f}, b0 = {0.1f, -0.2f, 0.3f};
  Tensor w = from_vector(w0, {2, 3}), b = from_vector(b0, {3});  // [2, 3] decayed, [3] not
  w.requires_grad_();
  b.requires_grad_();
  Tensor frozen = from_vector(std::vector<float>{1.0f, 2.0f}, {1, 2});  // requires no gradient: no state, never moved
  AdamWOptions o{0.01, 0.9, 0.95, 1e-8, 0.1};
  AdamW opt({{"w", &w}, {"b", &b}, {"frozen", &frozen}}, o);
  EXPECT_EQ(opt.slots().size(), 2u);
  // reference in double: p *= 1 - lr*wd (rank >= 2); m, v; p -= lr/(1-b1^t) m / (sqrt(v)/sqrt(1-b2^t) + eps)
  std::vector<double> pw(w0.begin(), w0.end()), pb(b0.begin(), b0.end()), mw(6), vw(6), mb(3), vb(3);
  auto ref = [&](std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, const std::vector<float>& g,
                 bool decay, double lr, int t) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (decay) p[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * (double)g[i] * g[i];
      p[i] -= lr / (1 - std::pow(o.beta1, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(o.beta2, t)) + o.eps);
    }
  };
  for (int t = 1; t <= 3; ++t) {
    const double lr = 0.01 * t;  // the schedule's lr, passed per step
    std::vector<float> gw = {0.3f * t, -0.1f, 0.05f, 1.0f, -2.0f / t, 0.0f}, gb = {-0.4f, 0.2f * t, 0.01f};
    w.set_grad(from_vector(gw, {2, 3}));
    b.set_grad(from_vector(gb, {3}));
    opt.step(lr);
    ref(pw, mw, vw, gw, true, lr, t);
    ref(pb, mb, vb, gb, false, lr, t);
    const auto aw = w.to_vector<float>(), ab = b.to_vector<float>();
    for (size_t i = 0; i < pw.size(); ++i) EXPECT_NEAR(aw[i], pw[i], 1e-6 * (1 + std::fabs(pw[i]))) << "w[" << i << "] step " << t;
    for (size_t i = 0; i < pb.size(); ++i) EXPECT_NEAR(ab[i], pb[i], 1e-6 * (1 + std::fabs(pb[i]))) << "b[" << i << "] step " << t;
  }
  EXPECT_EQ(opt.step_count(), 3);
  EXPECT_EQ(frozen.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  // a parameter without a gradient is left as it is
  b.zero_grad();
  w.set_grad(from_vector(std::vector<float>(6, 0.1f), {2, 3}));
  const auto before = b.to_vector<float>();
  opt.step(0.01);
  EXPECT_EQ(b.to_vector<float>(), before);
}

TEST(Optim, GradNormAndClippingAsTorch) {
  Tensor a = from_vector(std::vector<float>{3.0f, 0.0f}, {2}), c = from_vector(std::vector<float>{0.0f, 4.0f}, {1, 2});
  a.set_grad(from_vector(std::vector<float>{3.0f, 0.0f}, {2}));
  c.set_grad(from_vector(std::vector<float>{0.0f, 4.0f}, {1, 2}));
  const double n = grad_norm({&a, &c});
  EXPECT_NEAR(n, 5.0, 1e-6);  // sqrt(9 + 16) over both tensors
  clip_grads({&a, &c}, 1.0, n);  // scale 1 / (5 + 1e-6)
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(c.grad().to_vector<float>()[1], 4.0 / (5.0 + 1e-6), 1e-6);
  clip_grads({&a, &c}, 10.0, grad_norm({&a, &c}));  // under the bound: unchanged
  EXPECT_NEAR(grad_norm({&a, &c}), 5.0 / (5.0 + 1e-6), 1e-6);
}

// ---- schedules -------------------------------------------------------------------------
TEST(Optim, LRSchedules) {
  LRSchedule s{LRShape::wsd, DecayShape::linear, 4, 100, 0.2, 0.0};
  EXPECT_DOUBLE_EQ(s.factor(1), 0.2);  // t / (warmup + 1)
  EXPECT_DOUBLE_EQ(s.factor(4), 0.8);
  EXPECT_DOUBLE_EQ(s.factor(50), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(80), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(90), 0.5);
  EXPECT_DOUBLE_EQ(s.factor(100), 0.0);
  LRSchedule c{LRShape::cosine, DecayShape::linear, 0, 10, 0.0, 0.1};
  EXPECT_NEAR(c.factor(5), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(c.factor(10), 0.1, 1e-12);
  LRSchedule l{LRShape::linear, DecayShape::linear, 0, 10, 0.0, 0.0};
  EXPECT_NEAR(l.factor(3), 0.7, 1e-12);
  LRSchedule k{LRShape::constant, DecayShape::linear, 2, 10, 0.0, 0.0};
  EXPECT_DOUBLE_EQ(k.factor(9), 1.0);
}
