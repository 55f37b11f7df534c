// Reductions and shape ops: forward vs naive loops, gradchecks, meta.
#include <gtest/gtest.h>

#include "tests/gradcheck.h"

using namespace titan;
using namespace titan::testing;

TEST(Reduce, SumMeanOverAxes) {
  Tensor x = rand_t({2, 3, 4}, 1);
  auto v = x.to_vector<double>();
  auto at = [&](int i, int j, int k) { return v[(i * 3 + j) * 4 + k]; };
  auto s1 = sum(x, {1}).to_vector<double>();  // [2, 4]
  auto s02 = sum(x, {0, 2}, true);             // [1, 3, 1]
  auto m = mean(x, {-1}).to_vector<double>();  // [2, 3]
  EXPECT_EQ(s02.shape(), (Shape{1, 3, 1}));
  auto s02v = s02.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double r = 0;
      for (int j = 0; j < 3; ++j) r += at(i, j, k);
      EXPECT_NEAR(s1[i * 4 + k], r, 1e-14);
    }
  for (int j = 0; j < 3; ++j) {
    double r = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) r += at(i, j, k);
    EXPECT_NEAR(s02v[j], r, 1e-14);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double r = 0;
      for (int k = 0; k < 4; ++k) r += at(i, j, k);
      EXPECT_NEAR(m[i * 3 + j], r / 4, 1e-14);
    }
  double all = 0;
  for (double e : v) all += e;
  EXPECT_NEAR(sum(x).item<double>(), all, 1e-13);
  EXPECT_NEAR(mean(x).item<double>(), all / 24, 1e-14);
  gradcheck([](const std::vector<Tensor>& t) { return sum(t[0], {1}); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return sum(t[0], {0, 2}, true); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return mean(t[0], {0, 1}); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return sum(t[0].transpose(0, 2), {1}); }, {x});
  expect_meta([](const std::vector<Tensor>& t) { return sum(t[0], {1}); }, {x}, {2, 4}, DType::F64, 24);
  expect_meta([](const std::vector<Tensor>& t) { return mean(t[0], {2}); }, {x}, {2, 3}, DType::F64, 24 + 6);
  EXPECT_THROW(sum(x, {3}), Error);
}

TEST(Reduce, LargeColumnSumIsExact) {
  // exercises the threaded column path (outer == 1, inner split across threads)
  Tensor x = full({300, 1000}, 0.5, DType::F64);
  auto s = sum(x, {0}).to_vector<double>();
  for (double e : s) EXPECT_DOUBLE_EQ(e, 150.0);
}

TEST(Reduce, MaxWithIndicesAndGradient) {
  Tensor x = from_vector<double>({1, 7, 3, 7, 2, 0, -1, 5}, {2, 4});
  auto [v, i] = max_with_indices(x, 1);
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{7, 5}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 3}));  // first maximal element
  auto [v0, i0] = max_with_indices(x, 0, true);
  EXPECT_EQ(v0.shape(), (Shape{1, 4}));
  EXPECT_EQ(v0.to_vector<double>(), (std::vector<double>{2, 7, 3, 7}));
  Tensor xr = x.clone().detach().requires_grad_(true);
  sum(max(xr, 1)).backward();
  EXPECT_EQ(xr.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0, 0, 0, 0, 1}));
  gradcheck([](const std::vector<Tensor>& t) { return max(t[0], 0); }, {rand_t({3, 5}, 2)});
  gradcheck([](const std::vector<Tensor>& t) { return max(t[0], -1, true); }, {rand_t({3, 5}, 3)});
  expect_meta([](const std::vector<Tensor>& t) { return max(t[0], 1); }, {x}, {2}, DType::F64, 8);
}

TEST(Shape, ReshapePermuteTransposeSlice) {
  Tensor x = rand_t({2, 3, 4}, 4);
  auto v = x.to_vector<double>();
  Tensor p = permute(x, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  auto pv = p.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(pv[(k * 2 + i) * 3 + j], v[(i * 3 + j) * 4 + k]);
  Tensor s = slice(x, 2, 1, 3);
  auto sv = s.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(sv[(i * 3 + j) * 2 + k], v[(i * 3 + j) * 4 + k + 1]);
  EXPECT_EQ(slice(x, -1, -2, 4).shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(reshape(x, {-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3, 4}));
  gradcheck([](const std::vector<Tensor>& t) { return mul(reshape(t[0], {4, 6}), 2.0); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return mul(permute(t[0], {2, 0, 1}), 2.0); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return mul(transpose(t[0], 0, 2), 2.0); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return mul(slice(t[0], 1, 1, 3), 2.0); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return reshape(transpose(t[0], 1, 2), {2, 12}); }, {x});
  expect_meta([](const std::vector<Tensor>& t) { return permute(t[0], {1, 2, 0}); }, {x}, {3, 4, 2}, DType::F64, 0);
  expect_meta([](const std::vector<Tensor>& t) { return slice(t[0], 0, 1, 2); }, {x}, {1, 3, 4}, DType::F64, 0);
  EXPECT_THROW(slice(x, 0, 1, 5), Error);
  EXPECT_THROW(permute(x, {0, 0, 1}), Error);
  EXPECT_THROW(reshape(x, {5, -1}), Error);
}

TEST(Shape, ConcatSplitBroadcastCast) {
  Tensor a = rand_t({2, 3}, 5), b = rand_t({2, 1}, 6), c = rand_t({2, 2}, 7);
  Tensor cat = concat({a, b, c}, 1);
  EXPECT_EQ(cat.shape(), (Shape{2, 6}));
  auto cv = cat.to_vector<double>(), av = a.to_vector<double>(), bv = b.to_vector<double>(), ccv = c.to_vector<double>();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(cv[i * 6 + j], av[i * 3 + j]);
    EXPECT_EQ(cv[i * 6 + 3], bv[i]);
    for (int j = 0; j < 2; ++j) EXPECT_EQ(cv[i * 6 + 4 + j], ccv[i * 2 + j]);
  }
  auto parts = split(cat, {3, 1, 2}, 1);
  EXPECT_EQ(parts[0].to_vector<double>(), av);
  EXPECT_EQ(parts[2].to_vector<double>(), ccv);
  gradcheck([](const std::vector<Tensor>& t) { return concat({t[0], t[1], t[2]}, 1); }, {a, b, c});
  gradcheck([](const std::vector<Tensor>& t) { return concat({t[0], t[1]}, 0); }, {a, rand_t({1, 3}, 8)});
  gradcheck(
      [](const std::vector<Tensor>& t) {
        auto p = split(t[0], {1, 2}, 1);
        return add(mul(p[0], 3.0), sum(p[1], {1}, true));
      },
      {a});
  Tensor bt = broadcast_to(b, {2, 4});
  EXPECT_EQ(bt.to_vector<double>(), (std::vector<double>{bv[0], bv[0], bv[0], bv[0], bv[1], bv[1], bv[1], bv[1]}));
  gradcheck([](const std::vector<Tensor>& t) { return broadcast_to(t[0], {3, 2, 4}); }, {b});
  Tensor f = cast(a, DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_FLOAT_EQ(f.to_vector<float>()[0], (float)av[0]);
  expect_meta([](const std::vector<Tensor>& t) { return concat({t[0], t[1]}, 1); }, {a, b}, {2, 4}, DType::F64, 0);
  EXPECT_THROW(concat({a, rand_t({3, 3}, 9)}, 1), Error);
  EXPECT_THROW(split(a, {1, 1}, 1), Error);
  EXPECT_THROW(broadcast_to(a, {2, 4}), Error);
}

TEST(Meta, RemainingOpsShapeDtypeFlops) {
  Tensor x = rand_t({2, 3, 4}, 1);
  expect_meta([](const std::vector<Tensor>& t) { return reshape(t[0], {6, -1}); }, {x}, {6, 4}, DType::F64, 0);
  expect_meta([](const std::vector<Tensor>& t) { return transpose(t[0], 0, 2); }, {x}, {4, 3, 2}, DType::F64, 0);
  expect_meta([](const std::vector<Tensor>& t) { return broadcast_to(t[0], {5, 2, 3, 4}); }, {x}, {5, 2, 3, 4},
              DType::F64, 0);
  expect_meta([](const std::vector<Tensor>& t) { return cast(t[0], DType::F32); }, {x}, {2, 3, 4}, DType::F32, 0);
  expect_meta([](const std::vector<Tensor>& t) { return split(t[0], {1, 3}, 2)[1]; }, {x}, {2, 3, 3}, DType::F64, 0);
  expect_meta([](const std::vector<Tensor>& t) { return log_softmax(t[0]); }, {x}, {2, 3, 4}, DType::F64, 4.0 * 24);
  Tensor idx = from_vector<int64_t>({0, 1, 2, 3, 0, 1}, {2, 3, 1});
  expect_meta([](const std::vector<Tensor>& t) { return scatter(t[0], 2, t[1], t[2]); },
              {x, idx, rand_t({2, 3, 1}, 2)}, {2, 3, 4}, DType::F64, 0);
  expect_meta([](const std::vector<Tensor>& t) { return sum(t[0]); }, {x}, {}, DType::F64, 24);
}
