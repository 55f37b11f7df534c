// tests/gradcheck.h — the reusable numeric contracts for ops.
//
// gradcheck(f, inputs): f maps float64 inputs to one output tensor. The
// analytic gradient of L = sum(f(x) * W) (W fixed random weights) from
// backward() is compared with central finite differences
//   dL/dx_i ~ (L(x + eps e_i) - L(x - eps e_i)) / (2 eps)
// for every element of every floating input that requires grad.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"

namespace titan::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

inline Tensor rand_t(const Shape& s, uint64_t seed, DType t = DType::F64, double lo = -1, double hi = 1) {
  Generator g(seed);
  return rand_uniform(s, g, lo, hi, t);
}

inline double weighted_sum(const Tensor& out, const Tensor& w) {
  auto a = out.to_vector<double>();
  auto b = w.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Returns the max abs error (also asserted against atol + rtol * |numeric|).
inline double gradcheck(const Fn& f, std::vector<Tensor> inputs, double eps = 1e-6, double atol = 1e-7,
                        double rtol = 1e-6) {
  std::vector<Tensor> xs;
  for (auto& x : inputs) {
    Tensor c = x.clone().detach();
    if (c.dtype() == DType::F64) c.requires_grad_(true);
    xs.push_back(c);
  }
  Tensor out = f(xs);
  Tensor w = rand_t(out.shape(), 12345);
  Tensor loss = sum(mul(out, w));
  loss.backward();
  double worst = 0;
  NoGradGuard ng;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].requires_grad()) continue;
    Tensor ga = xs[k].grad();
    EXPECT_TRUE(ga.defined()) << "input " << k << " got no gradient";
    if (!ga.defined()) continue;
    auto analytic = ga.to_vector<double>();
    double* p = xs[k].data<double>();
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + eps;
      double lp = weighted_sum(f(xs), w);
      p[i] = orig - eps;
      double lm = weighted_sum(f(xs), w);
      p[i] = orig;
      const double numeric = (lp - lm) / (2 * eps);
      const double err = std::abs(numeric - analytic[i]);
      worst = std::max(worst, err);
      EXPECT_LE(err, atol + rtol * std::abs(numeric))
          << "input " << k << " element " << i << ": analytic " << analytic[i] << " numeric " << numeric;
    }
  }
  return worst;
}

// Runs f on meta copies of the inputs; checks output shape/dtype and the
// FLOPs the op family reports (forward only).
inline void expect_meta(const Fn& f, const std::vector<Tensor>& inputs, const Shape& shape, DType dt,
                        double flops) {
  std::vector<Tensor> ms;
  for (auto& x : inputs) ms.push_back(x.defined() ? empty(x.shape(), x.dtype(), Device::Meta) : Tensor());
  CostScope cs;
  Tensor out = f(ms);
  EXPECT_TRUE(out.is_meta());
  EXPECT_EQ(out.shape(), shape) << "meta shape " << shape_str(out.shape()) << " want " << shape_str(shape);
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_DOUBLE_EQ(cs.flops(), flops);
}

inline void expect_near_vec(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

}  // namespace titan::testing
