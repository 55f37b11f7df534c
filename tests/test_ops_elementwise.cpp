// Elementwise ops: forward against naive loops, backward against finite
// differences (double), meta shape/dtype/FLOPs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/gradcheck.h"

using namespace titan;
using namespace titan::testing;

namespace {
// naive broadcast reference for [A, B] (op) [B] and [A, 1]
template <typename F>
void check_binary(F op, double (*ref)(double, double), bool positive_b = false) {
  Tensor a = rand_t({3, 4}, 1);
  Tensor b = positive_b ? rand_t({4}, 2, DType::F64, 0.5, 2.0) : rand_t({4}, 2);
  Tensor c = positive_b ? rand_t({3, 1}, 3, DType::F64, 0.5, 2.0) : rand_t({3, 1}, 3);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  auto o1 = op(a, b).template to_vector<double>();
  auto o2 = op(a, c).template to_vector<double>();
  auto o3 = op(a.transpose(0, 1), a.transpose(0, 1)).template to_vector<double>();  // strided inputs
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      EXPECT_DOUBLE_EQ(o1[i * 4 + j], ref(av[i * 4 + j], bv[j]));
      EXPECT_DOUBLE_EQ(o2[i * 4 + j], ref(av[i * 4 + j], cv[i]));
      EXPECT_DOUBLE_EQ(o3[j * 3 + i], ref(av[i * 4 + j], av[i * 4 + j]));
    }
  gradcheck([&](const std::vector<Tensor>& x) { return op(x[0], x[1]); }, {a, b});
  gradcheck([&](const std::vector<Tensor>& x) { return op(x[0], x[1]); }, {a, c});
  gradcheck([&](const std::vector<Tensor>& x) { return op(x[1], x[0]); }, {a, positive_b ? c : b});
  expect_meta([&](const std::vector<Tensor>& x) { return op(x[0], x[1]); }, {a.to(DType::F32), b.to(DType::F32)},
              {3, 4}, DType::F32, 12);
}
}  // namespace

TEST(Binary, Add) { check_binary([](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; }); }
TEST(Binary, Sub) { check_binary([](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; }); }
TEST(Binary, Mul) { check_binary([](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; }); }
TEST(Binary, Div) {
  check_binary([](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; }, true);
}

TEST(Binary, ScalarOps) {
  Tensor a = rand_t({5}, 4);
  auto av = a.to_vector<double>();
  auto s = add(a, 2.5).to_vector<double>(), m = mul(a, -3.0).to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_DOUBLE_EQ(s[i], av[i] + 2.5);
    EXPECT_DOUBLE_EQ(m[i], av[i] * -3.0);
  }
  gradcheck([](const std::vector<Tensor>& x) { return add(x[0], 2.5); }, {a});
  gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], -3.0); }, {a});
  expect_meta([](const std::vector<Tensor>& x) { return mul(x[0], 2.0); }, {a}, {5}, DType::F64, 5);
}

TEST(Binary, ComparisonsAndWhere) {
  Tensor a = from_vector<double>({1, 5, 3, 7}, {4});
  Tensor b = from_vector<double>({2, 5, 1, 9}, {4});
  auto lt_v = lt(a, b), gt_v = gt(a, b), eq_v = eq(a, b);
  EXPECT_EQ(lt_v.dtype(), DType::Bool);
  std::vector<bool> l, g, e;
  for (int i = 0; i < 4; ++i) {
    l.push_back(lt_v.data<bool>()[i]);
    g.push_back(gt_v.data<bool>()[i]);
    e.push_back(eq_v.data<bool>()[i]);
  }
  EXPECT_EQ(l, (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(g, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(e, (std::vector<bool>{false, true, false, false}));
  Tensor w = where(lt_v, a, b);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 5, 1, 7}));
  // broadcast: [3, 4] cond with [4] and [3, 1]
  Tensor x = rand_t({3, 4}, 5), y = rand_t({4}, 6), z = rand_t({3, 1}, 7);
  Tensor cond = gt(x, zeros({}, DType::F64));
  auto cv = cond.to_vector<int64_t>();
  auto out = where(cond, y, z).to_vector<double>();
  auto yv = y.to_vector<double>(), zv = z.to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(out[i * 4 + j], cv[i * 4 + j] ? yv[j] : zv[i]);
  gradcheck([&](const std::vector<Tensor>& t) { return where(cond, t[0], t[1]); }, {y, z});
  expect_meta([&](const std::vector<Tensor>& t) { return where(t[0], t[1], t[2]); }, {cond, y, z}, {3, 4},
              DType::F64, 12);
  EXPECT_THROW(where(x, y, z), Error);  // condition must be bool
}

namespace {
struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double (*ref)(double);
  double lo, hi, flops_per_elem;
};
double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
}  // namespace

TEST(Unary, ForwardBackwardMeta) {
  std::vector<UnaryCase> cases = {
      {"exp", titan::exp, [](double x) { return std::exp(x); }, -2, 2, 1},
      {"log", titan::log, [](double x) { return std::log(x); }, 0.2, 3, 1},
      {"sqrt", titan::sqrt, [](double x) { return std::sqrt(x); }, 0.2, 3, 1},
      {"rsqrt", titan::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.2, 3, 2},
      {"neg", titan::neg, [](double x) { return -x; }, -2, 2, 1},
      {"abs", titan::abs, [](double x) { return std::abs(x); }, -2, 2, 1},
      {"silu", [](const Tensor& x) { return titan::silu(x); }, silu_ref, -4, 4, 4},
      {"gelu", [](const Tensor& x) { return titan::gelu(x); }, gelu_ref, -4, 4, 8},
      {"sigmoid", titan::sigmoid, sigmoid_ref, -4, 4, 3},
      {"tanh", titan::tanh, [](double x) { return std::tanh(x); }, -3, 3, 1},
      {"cos", titan::cos, [](double x) { return std::cos(x); }, -3, 3, 1},
      {"sin", titan::sin, [](double x) { return std::sin(x); }, -3, 3, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = rand_t({3, 5}, 11, DType::F64, c.lo, c.hi);
    if (std::string(c.name) == "abs") x = from_vector<double>({-1.5, -0.3, 0.4, 2.0, -0.7, 0.9}, {2, 3});
    auto xv = x.to_vector<double>();
    auto yv = c.fn(x).to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], c.ref(xv[i]), 1e-14 * (1 + std::abs(yv[i])));
    // float32 path agrees with the double reference to float precision
    auto yf = c.fn(x.to(DType::F32)).to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yf[i], c.ref(xv[i]), 2e-6 * (1 + std::abs(yv[i])));
    gradcheck([&](const std::vector<Tensor>& t) { return c.fn(t[0]); }, {x});
    expect_meta([&](const std::vector<Tensor>& t) { return c.fn(t[0]); }, {x.to(DType::F32)}, x.shape(), DType::F32,
                c.flops_per_elem * x.numel());
  }
}

TEST(Unary, Pow) {
  Tensor x = rand_t({6}, 12, DType::F64, 0.3, 2.0);
  auto xv = x.to_vector<double>();
  auto y = pow(x, 2.5).to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(y[i], std::pow(xv[i], 2.5), 1e-14);
  gradcheck([](const std::vector<Tensor>& t) { return pow(t[0], 2.5); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return pow(t[0], -1.0); }, {x});
  expect_meta([](const std::vector<Tensor>& t) { return pow(t[0], 3.0); }, {x}, {6}, DType::F64, 6);
}

TEST(Unary, ClampHasZeroGradientOutside) {
  Tensor x = from_vector<double>({-9, -7, -3, 0, 3, 6.5, 7, 8}, {8});
  Tensor xr = x.clone().detach().requires_grad_(true);
  Tensor y = clamp(xr, -7, 7);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{-7, -7, -3, 0, 3, 6.5, 7, 7}));
  sum(y).backward();
  // inclusive bounds, as PyTorch: gradient 1 on [-7, 7]
  EXPECT_EQ(xr.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 1, 1, 1, 1, 0}));
  Tensor z = from_vector<double>({-3, 0.5, 9}, {3});
  EXPECT_EQ(clamp(z, -INFINITY, 7).to_vector<double>(), (std::vector<double>{-3, 0.5, 7}));
  gradcheck([](const std::vector<Tensor>& t) { return clamp(t[0], -0.5, 0.5); },
            {from_vector<double>({-0.9, -0.2, 0.1, 0.7}, {4})});
  expect_meta([](const std::vector<Tensor>& t) { return clamp(t[0], -1, 1); }, {x}, {8}, DType::F64, 8);
  EXPECT_THROW(clamp(x, 2, 1), Error);
}

// The strided loop (nd_rows) merges dims and cuts long rows into pieces: every layout it can be handed gives the
// naive result, element for element — size-1 dims, a last dim of 1 with a stride (an interleaved slice), dims
// that merge for one operand only, a broadcast operand (stride 0), and sizes with few long rows (split across
// threads) or many short ones.
TEST(Strided, EveryLayoutVisitsEveryElementOnce) {
  for (int64_t R : {3, 700, 40000}) {
    Tensor base = rand_t({R, 6, 2}, 1);  // [R, 6, 2] interleaved pairs
    auto bv = base.to_vector<double>();
    // copy of an interleaved slice [R, 6, 1] (gpt-oss's gate / up halves)
    for (int64_t half : {0, 1}) {
      auto c = base.slice(2, half, half + 1).contiguous().to_vector<double>();
      for (int64_t i = 0; i < R * 6; ++i) ASSERT_EQ(c[i], bv[i * 2 + half]) << "R " << R << " half " << half;
    }
    // a permuted view (no dim merges) added to a broadcast row: out[j, r, h] = base[r, j, h] + b[h]
    Tensor b = rand_t({2}, 2);
    auto bb = b.to_vector<double>();
    auto p = add(base.permute({1, 0, 2}), b).to_vector<double>();
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t h = 0; h < 2; ++h)
          ASSERT_EQ(p[(j * R + r) * 2 + h], bv[(r * 6 + j) * 2 + h] + bb[h]) << "R " << R;
    // a column broadcast over a long row: out[r, k] = base[r, 0, 0] * col[k], k over 12 * 100 elements
    Tensor col = rand_t({1, 1200}, 3);
    auto cv = col.to_vector<double>();
    auto m = mul(base.slice(1, 0, 1).slice(2, 0, 1).reshape({R, 1}), col).to_vector<double>();
    for (int64_t r = 0; r < std::min<int64_t>(R, 50); ++r)
      for (int64_t k = 0; k < 1200; ++k) ASSERT_EQ(m[r * 1200 + k], bv[r * 12] * cv[k]) << "R " << R;
  }
  // one long strided row (split into pieces across threads): every second element of 2^20
  Tensor big = rand_t({1 << 21}, 4);
  auto v = big.to_vector<double>();
  auto s = big.reshape({1 << 20, 2}).slice(1, 1, 2).contiguous().to_vector<double>();
  for (int64_t i = 0; i < (1 << 20); ++i) ASSERT_EQ(s[i], v[2 * i + 1]);
}

// gpt-oss's fused expert activation against its definition (the composite HF writes), forward in double and
// float32, backward against finite differences with the clamps active on some elements, and without clamps.
TEST(Glu, ClampedSwigluIsHfsActivationOnInterleavedPairs) {
  const double alpha = 1.702;
  for (double limit : {0.9, 0.0}) {
    Tensor x = rand_t({3, 5, 8}, 1, DType::F64, -1.6, 1.6);  // [.., 2I]: pairs (gate, up)
    auto xv = x.to_vector<double>();
    auto y = clamped_swiglu(x, alpha, limit).to_vector<double>();
    ASSERT_EQ(y.size(), xv.size() / 2);
    int clamped = 0;
    for (size_t e = 0; e < y.size(); ++e) {
      double g = xv[2 * e], u = xv[2 * e + 1];
      if (limit > 0) {
        clamped += g > limit || std::fabs(u) > limit;
        g = std::min(g, limit);
        u = std::max(-limit, std::min(u, limit));
      }
      EXPECT_NEAR(y[e], (u + 1) * g / (1 + std::exp(-alpha * g)), 1e-15) << e;
    }
    if (limit > 0) EXPECT_GT(clamped, 5) << "the clamps were not exercised";
    gradcheck([&](const std::vector<Tensor>& t) { return clamped_swiglu(t[0], alpha, limit); }, {x});
    // float32: the same values to float32 rounding
    auto yf = clamped_swiglu(x.to(DType::F32), alpha, limit).to_vector<double>();
    for (size_t e = 0; e < y.size(); ++e) EXPECT_NEAR(yf[e], y[e], 1e-6) << e;
  }
  expect_meta([](const std::vector<Tensor>& t) { return clamped_swiglu(t[0], 1.702, 7.0); },
              {rand_t({4, 6}, 2).to(DType::F32)}, {4, 3}, DType::F32, 8.0 * 12);
  EXPECT_THROW(clamped_swiglu(rand_t({4, 5}, 3), alpha, 7.0), Error);  // odd: not pairs
}

// ... and the same bits in float32 as the composite of titan's own ops (clamps, sigmoid, products), forward and
// backward, on values that cross the limit.
TEST(Glu, ClampedSwigluEqualsTheCompositeInFloat32) {
  const double alpha = 1.702, limit = 7.0;
  Tensor x = rand_t({64, 96}, 5, DType::F64, -10, 10).to(DType::F32), dy = rand_t({64, 48}, 6).to(DType::F32);
  Tensor a = x.detach().requires_grad_(true), b = x.detach().requires_grad_(true);
  Tensor yf = clamped_swiglu(a, alpha, limit);
  Tensor p = b.reshape({64, 48, 2});
  Tensor g = clamp(p.slice(2, 0, 1).reshape({64, 48}), -INFINITY, limit);
  Tensor u = clamp(p.slice(2, 1, 2).reshape({64, 48}), -limit, limit);
  Tensor yc = mul(add(u, 1.0), mul(g, sigmoid(mul(g, alpha))));
  sum(mul(yf, dy)).backward();
  sum(mul(yc, dy)).backward();
  auto v1 = yf.to_vector<double>(), v2 = yc.to_vector<double>();
  auto same_bits = [](const Tensor& p, const Tensor& q, const char* what) {
    ASSERT_EQ(p.numel(), q.numel());
    const float* u = p.data<float>();
    const float* v = q.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i)
      ASSERT_EQ(std::memcmp(u + i, v + i, 4), 0) << what << " at " << i << ": " << u[i] << " vs " << v[i];
  };
  same_bits(yf.contiguous(), yc.contiguous(), "y");
  same_bits(a.grad().contiguous(), b.grad().contiguous(), "dx");  // signed zeros included
}
