// NN ops: matmul/linear, softmax family, cross-entropy, norms, RoPE,
// attention. Forward vs naive loops, gradchecks in double, meta FLOPs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "src/autograd/autocast.h"
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"
#include "tests/gradcheck.h"

using namespace titan;
using namespace titan::testing;

namespace {
std::vector<double> naive_mm(const std::vector<double>& a, const std::vector<double>& b, int M, int K, int N) {
  std::vector<double> c(M * N, 0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}
}  // namespace

TEST(Matmul, ForwardVariants) {
  Tensor a = rand_t({2, 3, 4}, 1), b = rand_t({2, 4, 5}, 2), w = rand_t({4, 5}, 3);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), wv = w.to_vector<double>();
  auto c = matmul(a, b).to_vector<double>();
  auto cw = matmul(a, w).to_vector<double>();
  for (int bi = 0; bi < 2; ++bi) {
    auto r = naive_mm({av.begin() + bi * 12, av.begin() + bi * 12 + 12}, {bv.begin() + bi * 20, bv.begin() + bi * 20 + 20},
                      3, 4, 5);
    auto rw = naive_mm({av.begin() + bi * 12, av.begin() + bi * 12 + 12}, wv, 3, 4, 5);
    for (int i = 0; i < 15; ++i) {
      EXPECT_NEAR(c[bi * 15 + i], r[i], 1e-14);
      EXPECT_NEAR(cw[bi * 15 + i], rw[i], 1e-14);
    }
  }
  // transposed views go to BLAS as flags: same numbers as the materialized copy
  Tensor at = rand_t({2, 4, 3}, 4);
  auto t1 = matmul(transpose(at, 1, 2), b).to_vector<double>();
  auto t2 = matmul(transpose(at, 1, 2).contiguous(), b).to_vector<double>();
  EXPECT_EQ(t1, t2);
  // a non-BLAS layout (permuted batch) falls back to a copy
  Tensor ap = rand_t({3, 2, 4}, 5);
  auto p1 = matmul(permute(ap, {1, 0, 2}), b).to_vector<double>();
  auto p2 = matmul(permute(ap, {1, 0, 2}).contiguous(), b).to_vector<double>();
  EXPECT_EQ(p1, p2);
  EXPECT_THROW(matmul(a, rand_t({5, 4}, 6)), Error);
  EXPECT_THROW(matmul(a, rand_t({3, 4, 5}, 6)), Error);
}

TEST(Matmul, Backward) {
  gradcheck([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {rand_t({3, 4}, 1), rand_t({4, 2}, 2)});
  gradcheck([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
            {rand_t({2, 3, 4}, 3), rand_t({2, 4, 2}, 4)});
  gradcheck([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {rand_t({2, 3, 4}, 5), rand_t({4, 2}, 6)});
  gradcheck([](const std::vector<Tensor>& t) { return matmul(t[0], transpose(t[1], 0, 1)); },
            {rand_t({3, 4}, 7), rand_t({2, 4}, 8)});
  gradcheck([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {rand_t({3, 4}, 9), rand_t({2, 4, 2}, 10)});
  expect_meta([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
              {rand_t({2, 3, 4}, 1), rand_t({4, 5}, 2)}, {2, 3, 5}, DType::F64, 2.0 * 2 * 3 * 4 * 5);
}

TEST(Linear, ForwardBackwardMeta) {
  Tensor x = rand_t({2, 3, 4}, 1), w = rand_t({5, 4}, 2), b = rand_t({5}, 3);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  auto y = linear(x, w, b).to_vector<double>();
  for (int n = 0; n < 6; ++n)
    for (int o = 0; o < 5; ++o) {
      double r = bv[o];
      for (int k = 0; k < 4; ++k) r += xv[n * 4 + k] * wv[o * 4 + k];
      EXPECT_NEAR(y[n * 5 + o], r, 1e-14);
    }
  gradcheck([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {x, w, b});
  gradcheck([](const std::vector<Tensor>& t) { return linear(t[0], t[1]); }, {x, w});
  // weight given as a transposed view (as tied / sharded weights can be)
  gradcheck([](const std::vector<Tensor>& t) { return linear(t[0], transpose(t[1], 0, 1)); }, {x, rand_t({4, 5}, 4)});
  expect_meta([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {x, w, b}, {2, 3, 5},
              DType::F64, 2.0 * 6 * 4 * 5 + 6 * 5);
  EXPECT_THROW(linear(x, rand_t({5, 3}, 5)), Error);
  EXPECT_THROW(linear(x, w, rand_t({4}, 6)), Error);
}

TEST(Softmax, ForwardBackwardMeta) {
  Tensor x = rand_t({3, 5}, 1, DType::F64, -3, 3);
  auto xv = x.to_vector<double>();
  auto s = softmax(x).to_vector<double>(), ls = log_softmax(x).to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    double z = 0;
    for (int j = 0; j < 5; ++j) z += std::exp(xv[i * 5 + j]);
    for (int j = 0; j < 5; ++j) {
      EXPECT_NEAR(s[i * 5 + j], std::exp(xv[i * 5 + j]) / z, 1e-15);
      EXPECT_NEAR(ls[i * 5 + j], xv[i * 5 + j] - std::log(z), 1e-14);
    }
  }
  // stability: huge logits do not overflow
  Tensor big = from_vector<double>({1000, 1001, 999}, {1, 3});
  auto sb = softmax(big).to_vector<double>();
  EXPECT_NEAR(sb[1], 1 / (1 + std::exp(-1) + std::exp(-2)), 1e-12);
  auto lb = log_softmax(big.to(DType::F32)).to_vector<double>();
  EXPECT_TRUE(std::isfinite(lb[0]));
  gradcheck([](const std::vector<Tensor>& t) { return softmax(t[0]); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return log_softmax(t[0]); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return softmax(t[0], 0); }, {x});
  expect_meta([](const std::vector<Tensor>& t) { return softmax(t[0]); }, {x}, {3, 5}, DType::F64, 60);
}

TEST(CrossEntropy, ForwardBackwardIgnoreIndexMeta) {
  Tensor logits = rand_t({4, 6}, 1, DType::F64, -2, 2);
  Tensor t = from_vector<int64_t>({2, -100, 5, 0}, {4});
  auto lv = logits.to_vector<double>();
  double ref = 0;
  std::vector<int> tv = {2, -100, 5, 0};
  for (int i = 0; i < 4; ++i) {
    if (tv[i] == -100) continue;
    double z = 0;
    for (int j = 0; j < 6; ++j) z += std::exp(lv[i * 6 + j]);
    ref += std::log(z) - lv[i * 6 + tv[i]];
  }
  ref /= 3;  // mean over valid targets
  EXPECT_NEAR(cross_entropy(logits, t).item<double>(), ref, 1e-14);
  gradcheck([&](const std::vector<Tensor>& x) { return cross_entropy(x[0], t); }, {logits});
  Tensor lr = logits.clone().detach().requires_grad_(true);
  cross_entropy(lr, t).backward();
  for (double g : lr.grad().slice(0, 1, 2).to_vector<double>()) EXPECT_EQ(g, 0.0);  // ignored row
  // stable at extreme logits
  Tensor big = from_vector<float>({1e4f, 0, -1e4f}, {1, 3});
  EXPECT_NEAR(cross_entropy(big, from_vector<int64_t>({0}, {1})).item<float>(), 0.0f, 1e-6);
  expect_meta([&](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1]); }, {logits, t}, {}, DType::F64,
              4.0 * 24);
  EXPECT_THROW(cross_entropy(logits, from_vector<int64_t>({1, 2, 6, 0}, {4})), Error);  // 6 >= vocab
  EXPECT_THROW(cross_entropy(logits, from_vector<int64_t>({1, 2, 3}, {3})), Error);
}

TEST(Norm, RmsNorm) {
  Tensor x = rand_t({2, 3, 8}, 1), w = rand_t({8}, 2, DType::F64, 0.5, 1.5);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  auto y = rms_norm(x, w, 1e-6).to_vector<double>();
  for (int r = 0; r < 6; ++r) {
    double ss = 0;
    for (int j = 0; j < 8; ++j) ss += xv[r * 8 + j] * xv[r * 8 + j];
    double rs = 1 / std::sqrt(ss / 8 + 1e-6);
    for (int j = 0; j < 8; ++j) EXPECT_NEAR(y[r * 8 + j], xv[r * 8 + j] * rs * wv[j], 1e-14);
  }
  gradcheck([](const std::vector<Tensor>& t) { return rms_norm(t[0], t[1], 1e-6); }, {x, w});
  // big enough for the threaded path (per-thread dw partials)
  gradcheck([](const std::vector<Tensor>& t) { return rms_norm(t[0], t[1], 1e-5); },
            {rand_t({2, 4, 16}, 3), rand_t({16}, 4)}, 1e-6, 1e-6, 1e-5);
  Tensor xl = rand_t({4096, 16}, 5), wl = rand_t({16}, 6);
  Tensor xr = xl.clone().detach().requires_grad_(true), wr = wl.clone().detach().requires_grad_(true);
  sum(rms_norm(xr, wr, 1e-6)).backward();
  // dw = sum over rows of xhat: check against the naive sum
  auto xlv = xl.to_vector<double>();
  std::vector<double> dw(16, 0);
  for (int r = 0; r < 4096; ++r) {
    double ss = 0;
    for (int j = 0; j < 16; ++j) ss += xlv[r * 16 + j] * xlv[r * 16 + j];
    double rs = 1 / std::sqrt(ss / 16 + 1e-6);
    for (int j = 0; j < 16; ++j) dw[j] += xlv[r * 16 + j] * rs;
  }
  expect_near_vec(wr.grad().to_vector<double>(), dw, 1e-9);
  expect_meta([](const std::vector<Tensor>& t) { return rms_norm(t[0], t[1], 1e-6); }, {x, w}, {2, 3, 8}, DType::F64,
              4.0 * 48);
  EXPECT_THROW(rms_norm(x, rand_t({7}, 3), 1e-6), Error);
}

TEST(Norm, LayerNorm) {
  Tensor x = rand_t({3, 6}, 1), w = rand_t({6}, 2), b = rand_t({6}, 3);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  auto y = layer_norm(x, w, b, 1e-5).to_vector<double>();
  for (int r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 6; ++j) m += xv[r * 6 + j] / 6;
    for (int j = 0; j < 6; ++j) v += (xv[r * 6 + j] - m) * (xv[r * 6 + j] - m) / 6;
    for (int j = 0; j < 6; ++j)
      EXPECT_NEAR(y[r * 6 + j], (xv[r * 6 + j] - m) / std::sqrt(v + 1e-5) * wv[j] + bv[j], 1e-14);
  }
  gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2], 1e-5); }, {x, w, b});
  gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], Tensor(), 1e-5); }, {x, w});
  expect_meta([](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2], 1e-5); }, {x, w, b}, {3, 6},
              DType::F64, 6.0 * 18);
}

TEST(Rope, RotateHalf) {
  const int B = 2, S = 3, H = 2, D = 4;
  Tensor x = rand_t({B, S, H, D}, 1);
  Tensor th = rand_t({S, D / 2}, 2, DType::F64, 0, 3);
  Tensor c = cos(th), s = sin(th);
  auto xv = x.to_vector<double>(), cv = c.to_vector<double>(), sv = s.to_vector<double>();
  auto y = rope(x, c, s).to_vector<double>();
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < S; ++t)
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < D; ++j) {
          const int base = ((b * S + t) * H + h) * D;
          // rotate_half(x) = [-x2, x1]; y = x * cos_full + rotate_half(x) * sin_full
          double rot = j < D / 2 ? -xv[base + j + D / 2] : xv[base + j - D / 2];
          double cf = cv[t * (D / 2) + j % (D / 2)], sf = sv[t * (D / 2) + j % (D / 2)];
          EXPECT_NEAR(y[base + j], xv[base + j] * cf + rot * sf, 1e-14);
        }
  gradcheck([&](const std::vector<Tensor>& t) { return rope(t[0], c, s); }, {x});
  expect_meta([&](const std::vector<Tensor>& t) { return rope(t[0], t[1], t[2]); }, {x, c, s}, x.shape(), DType::F64,
              3.0 * x.numel());
  EXPECT_THROW(rope(x, rand_t({S, D}, 3), s), Error);
}

namespace {
// naive attention: [B, S, Hq, D] layout
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                                    bool causal, int64_t window) {
  const int B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3), Hkv = k.size(2);
  auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  std::vector<double> sk = sinks.defined() ? sinks.to_vector<double>() : std::vector<double>();
  std::vector<double> out(q.numel(), 0);
  const double scale = 1 / std::sqrt((double)D);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int g = h / (Hq / Hkv);
      for (int i = 0; i < S; ++i) {
        std::vector<double> sc(S, -INFINITY);
        double m = sk.empty() ? -INFINITY : sk[h];
        for (int j = 0; j < S; ++j) {
          if (causal && j > i) continue;
          if (window > 0 && j <= i - window) continue;
          double d = 0;
          for (int c = 0; c < D; ++c) d += qv[((b * S + i) * Hq + h) * D + c] * kv[((b * S + j) * Hkv + g) * D + c];
          sc[j] = d * scale;
          m = std::max(m, sc[j]);
        }
        double z = sk.empty() ? 0 : std::exp(sk[h] - m);
        for (int j = 0; j < S; ++j) z += std::exp(sc[j] - m);
        for (int j = 0; j < S; ++j) {
          double p = std::exp(sc[j] - m) / z;
          for (int c = 0; c < D; ++c) out[((b * S + i) * Hq + h) * D + c] += p * vv[((b * S + j) * Hkv + g) * D + c];
        }
      }
    }
  return out;
}
}  // namespace

TEST(Attention, GqaCausalWindowSinks) {
  const int B = 2, S = 5, Hq = 4, Hkv = 2, D = 3;
  Tensor q = rand_t({B, S, Hq, D}, 1), k = rand_t({B, S, Hkv, D}, 2), v = rand_t({B, S, Hkv, D}, 3);
  Tensor sinks = rand_t({Hq}, 4);
  struct Case {
    bool causal;
    int64_t window;
    bool sink;
  };
  for (Case cs : {Case{true, 0, false}, Case{false, 0, false}, Case{true, 2, false}, Case{true, 0, true},
                  Case{true, 3, true}}) {
    SCOPED_TRACE(::testing::Message() << "causal " << cs.causal << " window " << cs.window << " sinks " << cs.sink);
    AttentionOptions o;
    o.causal = cs.causal;
    o.window = cs.window;
    Tensor sk = cs.sink ? sinks : Tensor();
    auto y = scaled_dot_product_attention(q, k, v, sk, o).to_vector<double>();
    expect_near_vec(y, naive_attention(q, k, v, sk, cs.causal, cs.window), 1e-13);
    if (cs.sink)
      gradcheck([&](const std::vector<Tensor>& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3], o); },
                {q, k, v, sinks});
    else
      gradcheck([&](const std::vector<Tensor>& t) { return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), o); },
                {q, k, v});
  }
  // meta: shape and FLOPs (QK^T and PV GEMMs plus softmax work) over the
  // query-key pairs of the visible tiles (S = 5: one 128-tile), the kernel's work
  AttentionOptions o;
  const double pairs = S * S;
  expect_meta([&](const std::vector<Tensor>& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3], o); },
              {q, k, v, sinks}, q.shape(), DType::F64, B * Hq * (4.0 * pairs * D + 5.0 * pairs));
  AttentionOptions w;
  w.window = 2;
  const double wpairs = S * S;
  expect_meta([&](const std::vector<Tensor>& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3], w); },
              {q, k, v, sinks}, q.shape(), DType::F64, B * Hq * (4.0 * wpairs * D + 5.0 * wpairs));
  EXPECT_THROW(scaled_dot_product_attention(q, rand_t({B, S, 3, D}, 5), rand_t({B, S, 3, D}, 6), Tensor(), o), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, rand_t({Hkv}, 7), o), Error);
}

TEST(GroupedLinear, ExpertsWithSkewedCounts) {
  // 3 experts: 2 rows, 0 rows (an expert with no tokens), 3 rows
  std::vector<int64_t> counts = {2, 0, 3};
  Tensor x = rand_t({5, 4}, 1), w = rand_t({3, 4, 6}, 2), b = rand_t({3, 6}, 3);
  auto y = grouped_linear(x, w, b, counts).to_vector<double>();
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  const int expert_of[5] = {0, 0, 2, 2, 2};
  for (int r = 0; r < 5; ++r)
    for (int n = 0; n < 6; ++n) {
      const int e = expert_of[r];
      double ref = bv[e * 6 + n];
      for (int k = 0; k < 4; ++k) ref += xv[r * 4 + k] * wv[(e * 4 + k) * 6 + n];
      EXPECT_NEAR(y[r * 6 + n], ref, 1e-14);
    }
  gradcheck([&](const std::vector<Tensor>& t) { return grouped_linear(t[0], t[1], t[2], counts); }, {x, w, b});
  gradcheck([&](const std::vector<Tensor>& t) { return grouped_linear(t[0], t[1], Tensor(), {5, 0, 0}); }, {x, w});
  expect_meta([&](const std::vector<Tensor>& t) { return grouped_linear(t[0], t[1], t[2], counts); }, {x, w, b},
              {5, 6}, DType::F64, 2.0 * 5 * 4 * 6 + 5 * 6);
  EXPECT_THROW(grouped_linear(x, w, b, {2, 2, 2}), Error);
}

// ---- float32 kernels (the paths the float64 checks above do not run) ----
namespace {
std::vector<float> randf(size_t n, uint64_t seed) {
  auto v = rand_t({(int64_t)n}, seed).to_vector<double>();
  return std::vector<float>(v.begin(), v.end());
}
}  // namespace

// gemm<float> (oneDNN on AVX512 outside parallel regions, else OpenBLAS; ctest runs this again with oneDNN held
// to AVX2, the OpenBLAS path): C = alpha op(A) op(B) + beta C within float32 accumulation's bound of the exact
// product, for every transpose, padded leading dimensions, scaled and accumulating calls, sizes on both sides of
// the primitive threshold, and inside a parallel region.
TEST(Gemm, Float32IsTheProductWithinFloat32Accumulation) {
  std::printf("[gemm] float32 on %s\n", detail::gemm_f32_on_onednn() ? "onednn (outside parallel regions)" : "openblas");
  struct Case {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t pad;
  };
  const std::vector<Case> cases = {{false, false, 64, 64, 64, 1, 0, 0},     {false, true, 256, 96, 128, 1, 0, 3},
                                   {true, false, 130, 128, 300, 1, 1, 0},  {true, true, 33, 70, 517, 0.5f, 0, 1},
                                   {false, false, 257, 96, 1, 1, 0, 0},    {false, true, 300, 200, 500, 1, 1, 5},
                                   {true, false, 128, 1, 128, 2, 0.25f, 0}, {false, true, 5, 7, 3, 1, 0, 2},
                                   {false, false, 96, 80, 64, 0.5f, 0.25f, 2}, {true, true, 70, 90, 60, 0, 1, 1}};
  for (bool in_parallel : {false, true})
    for (const Case& c : cases) {
      const int64_t ar = c.ta ? c.k : c.m, lda = (c.ta ? c.m : c.k) + c.pad;
      const int64_t br = c.tb ? c.n : c.k, ldb = (c.tb ? c.k : c.n) + c.pad, ldc = c.n + c.pad;
      auto A = randf(ar * lda, 1 + c.m), B = randf(br * ldb, 2 + c.n), C = randf(c.m * ldc, 3 + c.k);
      std::vector<float> out = C;
      auto run = [&] {
        detail::gemm<float>(c.ta, c.tb, c.m, c.n, c.k, c.alpha, A.data(), lda, B.data(), ldb, c.beta, out.data(), ldc);
      };
      if (in_parallel) {
#pragma omp parallel num_threads(2)
#pragma omp single
        run();
      } else {
        run();
      }
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double exact = 0, mag = 0;
          for (int64_t p = 0; p < c.k; ++p) {
            const double a = c.ta ? A[p * lda + i] : A[i * lda + p], b = c.tb ? B[j * ldb + p] : B[p * ldb + j];
            exact += a * b;
            mag += std::fabs(a * b);
          }
          const double ref = c.alpha * exact + c.beta * C[i * ldc + j];
          const double bound =
              (c.k + 2) * std::ldexp(1.0, -24) * (std::fabs(c.alpha) * mag + std::fabs(c.beta * C[i * ldc + j])) + 1e-30;
          ASSERT_LE(std::fabs(out[i * ldc + j] - ref), bound)
              << "ta=" << c.ta << " tb=" << c.tb << " " << c.m << "x" << c.n << "x" << c.k << " at " << i << "," << j
              << (in_parallel ? " inside a parallel region" : "");
        }
      for (int64_t i = 0; i < c.m; ++i)  // the padding is left alone
        for (int64_t j = c.n; j < ldc; ++j) ASSERT_EQ(out[i * ldc + j], C[i * ldc + j]);
    }
}

// bf16 experts (autocast): small experts (weight <= 2^18 elements) multiply on sgemm over the rounded operands,
// side by side where the split allows, large ones on oneDNN one at a time; both equal the float64 product of the
// bf16-rounded operands within bf16's output rounding, forward and backward; the small ones give the same bits on
// one thread as on two (the kernel is chosen by the weight's shape alone).
TEST(GroupedLinear, Bf16ExpertsSmallOnSgemmLargeOnOneDnn) {
  for (const auto& [K, N, counts] :
       {std::tuple<int64_t, int64_t, std::vector<int64_t>>{48, 40, {70, 0, 95, 33, 120, 64}},
        std::tuple<int64_t, int64_t, std::vector<int64_t>>{512, 640, {20, 0, 37, 5}}}) {
    const int64_t E = (int64_t)counts.size();
    int64_t R = 0;
    for (int64_t c : counts) R += c;
    Tensor x = rand_t({R, K}, 1, DType::F32), w = rand_t({E, K, N}, 2, DType::F32), g = rand_t({R, N}, 4, DType::F32);
    auto run = [&] {
      AutocastScope bf16(DType::BF16);
      Tensor xs = x.detach().requires_grad_(true), ws = w.detach().requires_grad_(true);
      Tensor y = grouped_linear(xs, ws, Tensor(), counts);
      sum(mul(y, g)).backward();
      return std::vector<std::vector<float>>{y.to_vector<float>(), xs.grad().to_vector<float>(),
                                             ws.grad().to_vector<float>()};
    };
    auto got = run();
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    auto one = run();
    omp_set_num_threads(threads);
    // float64 reference on the rounded operands; y's gradient is g times 1 (mul's backward of the bf16 y), rounded
    auto r = [](const std::vector<float>& v) {
      std::vector<double> o(v.size());
      for (size_t i = 0; i < v.size(); ++i) o[i] = round_to_bf16(v[i]);
      return o;
    };
    const std::vector<double> xr = r(x.to_vector<float>()), wr = r(w.to_vector<float>()), gr = r(g.to_vector<float>());
    std::vector<double> y(R * N, 0), dx(R * K, 0), dw(E * K * N, 0);
    for (int64_t e = 0, row = 0; e < E; row += counts[e], ++e)
      for (int64_t i = row; i < row + counts[e]; ++i)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n) {
            y[i * N + n] += xr[i * K + k] * wr[(e * K + k) * N + n];
            dx[i * K + k] += gr[i * N + n] * wr[(e * K + k) * N + n];
            dw[(e * K + k) * N + n] += xr[i * K + k] * gr[i * N + n];
          }
    const std::vector<double>* ref[] = {&y, &dx, &dw};
    const char* what[] = {"y", "dx", "dw"};
    for (int t = 0; t < 3; ++t) {
      for (size_t i = 0; i < ref[t]->size(); ++i) {
        const double v = (*ref[t])[i];  // bf16's output rounding (2^-9 relative) plus float32 sums
        ASSERT_NEAR(got[t][i], v, std::ldexp(std::fabs(v), -8) + 1e-5 * std::sqrt((double)K * R))
            << what[t] << " at " << i << ", K " << K << " N " << N;
      }
      if (K * N <= (1 << 18)) {
        EXPECT_EQ(got[t], one[t]) << what[t] << ": not the same bits on one thread";
      }
    }
  }
}

// A bf16 run's experts keep their input's bf16 pack for the weights' gradient (half float32's memory; two
// projections of one input, as gate and up, share it), and their gradients are the bits of the kernels on the
// float32 input (the bf16 GEMMs read x rounded either way): small experts (sgemm) and large ones (oneDNN).
TEST(GroupedLinear, Bf16ExpertsKeepOneBf16PackOfTheirInput) {
  auto cpu_bytes = [] { return MemoryTracker::get(Device::CPU).stats().total_current; };
  for (const auto& [K, N, counts] :
       {std::tuple<int64_t, int64_t, std::vector<int64_t>>{48, 40, {70, 0, 95, 33}},
        std::tuple<int64_t, int64_t, std::vector<int64_t>>{512, 640, {20, 0, 37, 5}}}) {
    const int64_t E = (int64_t)counts.size();
    int64_t R = 0;
    for (int64_t c : counts) R += c;
    Tensor x = rand_t({R, K}, 5, DType::F32).requires_grad_(true), g = rand_t({R, N}, 8, DType::F32);
    Tensor w[2] = {rand_t({E, K, N}, 6, DType::F32).requires_grad_(true),
                   rand_t({E, K, N}, 7, DType::F32).requires_grad_(true)};
    std::vector<Tensor> want[2];
    {
      AutocastScope bf16(DType::BF16);
      const int64_t before = cpu_bytes();
      Tensor y0 = grouped_linear(x, w[0], Tensor(), counts), y1 = grouped_linear(x, w[1], Tensor(), counts);
      EXPECT_EQ(cpu_bytes() - before, 2 * R * N * 4 + R * K * 2) << "two projections of one input: one bf16 pack";
      EXPECT_TRUE(has_bf16_pack(x));
      sum(add(mul(y0, g), mul(y1, g))).backward();  // each y's gradient is g
      NoGradGuard ng;
      for (int i = 0; i < 2; ++i) want[i] = detail::grouped_linear_backward(g, x.detach(), w[i].detach(), false, counts, true);
    }
    EXPECT_EQ(w[0].grad().to_vector<float>(), want[0][1].to_vector<float>()) << "K " << K;
    EXPECT_EQ(w[1].grad().to_vector<float>(), want[1][1].to_vector<float>()) << "K " << K;
    EXPECT_EQ(x.grad().to_vector<float>(), add(want[0][0], want[1][0]).to_vector<float>()) << "K " << K;
  }
  // no gradient wanted (evaluation): nothing kept
  Tensor x = rand_t({64, 48}, 9, DType::F32), w = rand_t({2, 48, 40}, 10, DType::F32);
  AutocastScope bf16(DType::BF16);
  Tensor y = grouped_linear(x, w, Tensor(), {30, 34});
  EXPECT_FALSE(has_bf16_pack(x));
}

// float32 experts: their products cut into fixed blocks run side by side (one thread each), whatever the split of
// the rows; both splits equal the float64 product within float32 rounding, forward and backward, and give the
// same bits on a second run and on one thread.
TEST(GroupedLinear, Float32ExpertsSideBySideOrOneAtATime) {
  const int64_t K = 48, N = 40, E = 6;
  for (const std::vector<int64_t>& counts :
       {std::vector<int64_t>{70, 0, 95, 33, 120, 64}, std::vector<int64_t>{5, 0, 370, 2, 1, 4}}) {
    int64_t R = 0;
    for (int64_t c : counts) R += c;
    Tensor x = rand_t({R, K}, 1), w = rand_t({E, K, N}, 2), b = rand_t({E, N}, 3), g = rand_t({R, N}, 4);
    auto grads_of = [&](DType dt) {
      Tensor xs = x.to(dt).detach().requires_grad_(true), ws = w.to(dt).detach().requires_grad_(true),
             bs = b.to(dt).detach().requires_grad_(true);
      Tensor y = grouped_linear(xs, ws, bs, counts);
      sum(mul(y, g.to(dt))).backward();
      return std::vector<std::vector<double>>{y.to_vector<double>(), xs.grad().to_vector<double>(),
                                              ws.grad().to_vector<double>(), bs.grad().to_vector<double>()};
    };
    auto ref = grads_of(DType::F64), f32 = grads_of(DType::F32), again = grads_of(DType::F32);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);  // one thread: experts one at a time
    auto one = grads_of(DType::F32);
    omp_set_num_threads(threads);
    const char* what[] = {"y", "dx", "dw", "db"};
    for (int t = 0; t < 4; ++t) {
      double scale = 0;
      for (double v : ref[t]) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < ref[t].size(); ++i)
        ASSERT_NEAR(f32[t][i], ref[t][i], 1e-5 * scale * std::sqrt((double)R)) << what[t] << " at " << i;
      EXPECT_EQ(f32[t], again[t]) << what[t] << ": not the same bits on a second run";
      EXPECT_EQ(f32[t], one[t]) << what[t] << ": not the same bits on " << threads << " threads and on one";
    }
  }
}
