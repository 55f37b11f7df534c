// Indexing ops: forward vs naive loops, gradchecks, meta, range errors.
#include <gtest/gtest.h>

#include "tests/gradcheck.h"

using namespace titan;
using namespace titan::testing;

TEST(Index, Embedding) {
  Tensor w = rand_t({6, 3}, 1);
  Tensor ids = from_vector<int64_t>({4, 0, 4, 2, 5, 1}, {2, 3});
  Tensor y = embedding(w, ids);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  auto wv = w.to_vector<double>(), yv = y.to_vector<double>();
  std::vector<int64_t> iv = {4, 0, 4, 2, 5, 1};
  for (int t = 0; t < 6; ++t)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(yv[t * 3 + c], wv[iv[t] * 3 + c]);
  gradcheck([&](const std::vector<Tensor>& x) { return embedding(x[0], ids); }, {w});  // row 4 used twice
  expect_meta([&](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); }, {w, ids}, {2, 3, 3}, DType::F64, 0);
  try {
    embedding(w, from_vector<int64_t>({1, 6}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(embedding(w, from_vector<double>({1, 2}, {2})), Error);  // float ids
}

TEST(Index, GatherScatter) {
  Tensor x = rand_t({3, 4}, 2);
  Tensor idx = from_vector<int64_t>({3, 0, 1, 1, 2, 0}, {3, 2});
  auto xv = x.to_vector<double>();
  auto g = gather(x, 1, idx).to_vector<double>();
  std::vector<int64_t> iv = {3, 0, 1, 1, 2, 0};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(g[i * 2 + j], xv[i * 4 + iv[i * 2 + j]]);
  gradcheck([&](const std::vector<Tensor>& t) { return gather(t[0], 1, idx); }, {x});
  gradcheck([&](const std::vector<Tensor>& t) { return gather(t[0], 0, from_vector<int64_t>({2, 0, 1, 2}, {1, 4})); },
            {x});
  Tensor src = rand_t({3, 2}, 3);
  auto sv = src.to_vector<double>();
  auto sa = scatter_add(x, 1, idx, src).to_vector<double>();
  auto sc = scatter(x, 1, idx, src).to_vector<double>();
  std::vector<double> ra = xv, rc = xv;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      ra[i * 4 + iv[i * 2 + j]] += sv[i * 2 + j];
      rc[i * 4 + iv[i * 2 + j]] = sv[i * 2 + j];
    }
  EXPECT_EQ(sa, ra);
  EXPECT_EQ(sc, rc);
  gradcheck([&](const std::vector<Tensor>& t) { return scatter_add(t[0], 1, idx, t[1]); }, {x, src});
  gradcheck([&](const std::vector<Tensor>& t) { return scatter(t[0], 1, idx, t[1]); }, {x, src});
  expect_meta([&](const std::vector<Tensor>& t) { return gather(t[0], 1, t[1]); }, {x, idx}, {3, 2}, DType::F64, 0);
  expect_meta([&](const std::vector<Tensor>& t) { return scatter_add(t[0], 1, t[1], t[2]); }, {x, idx, src}, {3, 4},
              DType::F64, 6);
  EXPECT_THROW(gather(x, 1, from_vector<int64_t>({4}, {1, 1})), Error);    // shape
  EXPECT_THROW(gather(x, 1, from_vector<int64_t>({0, 4, 0}, {3, 1})), Error);  // range
}

TEST(Index, IndexSelectIndexAdd) {
  Tensor x = rand_t({4, 3}, 4);
  Tensor idx = from_vector<int64_t>({2, 0, 2}, {3});
  auto xv = x.to_vector<double>();
  const std::vector<int> rows = {2, 0, 2};
  auto s = index_select(x, 0, idx).to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(s[i * 3 + c], xv[rows[i] * 3 + c]);
  auto s1 = index_select(x, 1, from_vector<int64_t>({1}, {1})).to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s1[i], xv[i * 3 + 1]);
  gradcheck([&](const std::vector<Tensor>& t) { return index_select(t[0], 0, idx); }, {x});
  gradcheck([&](const std::vector<Tensor>& t) { return index_select(t[0], 1, from_vector<int64_t>({2, 2, 0}, {3})); },
            {x});
  Tensor src = rand_t({3, 3}, 5);
  auto sv = src.to_vector<double>();
  auto a = index_add(x, 0, idx, src).to_vector<double>();
  std::vector<double> r = xv;
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 3; ++c) r[rows[i] * 3 + c] += sv[i * 3 + c];
  expect_near_vec(a, r, 1e-15);
  gradcheck([&](const std::vector<Tensor>& t) { return index_add(t[0], 0, idx, t[1]); }, {x, src});
  expect_meta([&](const std::vector<Tensor>& t) { return index_select(t[0], 0, t[1]); }, {x, idx}, {3, 3},
              DType::F64, 0);
  expect_meta([&](const std::vector<Tensor>& t) { return index_add(t[0], 0, t[1], t[2]); }, {x, idx, src}, {4, 3},
              DType::F64, 9);
  EXPECT_THROW(index_select(x, 0, from_vector<int64_t>({4}, {1})), Error);
  EXPECT_THROW(index_add(x, 0, idx, rand_t({2, 3}, 6)), Error);
}

TEST(Index, TopkStableAndGradient) {
  Tensor x = from_vector<double>({0.1, 0.9, 0.5, 0.9, -1, 3, 2, 2, 2, 0}, {2, 5});
  auto [v, i] = topk(x, 3);
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{0.9, 0.9, 0.5, 3, 2, 2}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 2, 0, 1, 2}));  // ties: lower index first
  EXPECT_EQ(i.dtype(), DType::I64);
  gradcheck([](const std::vector<Tensor>& t) { return topk(t[0], 2).first; }, {rand_t({3, 6}, 7)});
  expect_meta([](const std::vector<Tensor>& t) { return topk(t[0], 2).first; }, {x}, {2, 2}, DType::F64,
              10 * std::log2(3.0));
  EXPECT_THROW(topk(x, 6), Error);
}

TEST(Index, ArgsortStableAnyDtype) {
  Tensor x = from_vector<int64_t>({3, 1, 2, 1, 3, 0}, {6});  // expert ids: integer input
  EXPECT_EQ(argsort(x).to_vector<int64_t>(), (std::vector<int64_t>{5, 1, 3, 2, 0, 4}));
  EXPECT_EQ(argsort(x, true).to_vector<int64_t>(), (std::vector<int64_t>{0, 4, 2, 1, 3, 5}));
  Tensor f = from_vector<float>({0.5f, -1.f, 0.5f, 2.f}, {2, 2});
  EXPECT_EQ(argsort(f).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  Tensor m = empty({4, 7}, DType::F32, Device::Meta);
  Tensor mi = argsort(m);
  EXPECT_TRUE(mi.is_meta());
  EXPECT_EQ(mi.shape(), (Shape{4, 7}));
  EXPECT_EQ(mi.dtype(), DType::I64);
}
