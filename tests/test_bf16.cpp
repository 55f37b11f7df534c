// bfloat16: the rounding, the bf16 GEMM (oneDNN or the sgemm fallback) and bf16 autocast's GEMM ops.
// Numeric contracts: a bf16 GEMM is the exact product of the bf16-rounded operands up to float32 accumulation's
// error, on whichever kernel this CPU runs (ctest runs this file again with oneDNN capped below AVX512-BF16
// and below AVX512: the bound is the same, so the kernels agree to float32 accumulation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>

#include <omp.h>

#include "src/autograd/checkpoint.h"
#include "src/nn/attention_variants.h"
#include "src/ops/autocast.h"
#include "src/ops/float8.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"
#include "src/tensor/memory.h"
#include "tests/gradcheck.h"

using namespace titan;
using namespace titan::testing;

namespace {
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool cpu_has(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}
bool is_bf16(float v) { return std::isnan(v) || bits(v) == bits(round_to_bf16(v)); }
std::vector<float> randv(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A GEMM problem with its strides: C [m, n] (row stride ldc) = alpha op(A) op(B) + beta C.
struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t lda, ldb, ldc;
};
// The entries of C off the exact product of op(A) (a(i, p)) and op(B) (b(p, j)) by more than float32
// accumulation's error bound, plus the padding entries (columns n..ldc) that changed from C0.
template <typename ReadA, typename ReadB>
int off_entries(const GemmCase& c, ReadA a, ReadB b, const std::vector<float>& C0, const std::vector<float>& C) {
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = 0, mag = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double x = a(i, p), y = b(p, j);
        exact += x * y;
        mag += std::fabs(x * y);
      }
      const double ref = c.alpha * exact + c.beta * C0[i * c.ldc + j];
      const double bound =
          (c.k + 2) * std::ldexp(1.0, -24) * (std::fabs(c.alpha) * mag + std::fabs(c.beta * C0[i * c.ldc + j]));
      bad += std::fabs(C[i * c.ldc + j] - ref) > bound + 1e-30;
    }
    for (int64_t j = c.n; j < c.ldc; ++j) bad += C[i * c.ldc + j] != C0[i * c.ldc + j];  // padding untouched
  }
  return bad;
}
}  // namespace

TEST(Bf16, RoundsToNearestEvenKeepsNaNAndOverflowsToInfinity) {
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F808000u))), 0x3F800000u);  // tie, even below
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F818000u))), 0x3F820000u);  // tie, even above
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F808001u))), 0x3F810000u);  // past the tie
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F807FFFu))), 0x3F800000u);
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x7F7FFFFFu))), 0x7F800000u);  // float32 max: past bf16's, to inf
  EXPECT_EQ(bits(round_to_bf16(-INFINITY)), 0xFF800000u);
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7F800001u))));  // a NaN whose payload is in the low bits only
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits_to_float(0xC040), -3.0f);
  // the vectorized loop equals the scalar rounding on every class of bit pattern
  std::mt19937 g(7);
  std::vector<float> v(1 << 16), w;
  for (auto& x : v) x = from_bits(g());
  w = v;
  round_to_bf16(w.data(), (int64_t)w.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float s = round_to_bf16(v[i]);
    if (std::isnan(s)) ASSERT_TRUE(std::isnan(w[i])) << i;
    else ASSERT_EQ(bits(w[i]), bits(s)) << std::hex << bits(v[i]);
  }
  // and the vectorizing packer (the bf16 GEMM's operands) gives the scalar conversion's bits, NaNs included
  std::vector<uint16_t> packed(v.size());
  float_to_bf16_bits(v.data(), packed.data(), (int64_t)v.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(packed[i], float_to_bf16_bits(v[i])) << std::hex << bits(v[i]);
}

// C = alpha op(A) op(B) + beta C against the exact (double) product of the bf16 roundings: within float32
// accumulation's bound, on this CPU's kernel; and measurably not the float32 product.
TEST(Bf16Gemm, IsTheProductOfRoundedOperandsToFloat32Accumulation) {
  const std::string kernel = detail::gemm_bf16_kernel();
  std::printf("[bf16 gemm] kernel: %s\n", kernel.c_str());
  if (const char* want = std::getenv("TITAN_BF16_GEMM_EXPECT")) {
    EXPECT_NE(kernel.find(want), std::string::npos) << "expected a kernel matching '" << want << "', got " << kernel;
  } else if (!std::getenv("DNNL_MAX_CPU_ISA") && cpu_has("avx512_bf16")) {
    EXPECT_EQ(kernel.rfind("onednn", 0), 0u) << "this CPU has AVX512-BF16 but the bf16 GEMM runs " << kernel;
  }
  struct Case {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t pad;  // extra leading-dimension elements
  };
  const std::vector<Case> cases = {{false, false, 64, 64, 64, 1, 0, 0},   {false, true, 37, 29, 101, 1, 0, 3},
                                   {true, false, 5, 130, 17, 1, 1, 0},    {true, true, 1, 7, 300, 0.5f, 0, 1},
                                   {false, false, 257, 96, 1, 1, 0, 0},   {false, true, 300, 200, 500, 1, 1, 5},
                                   {true, false, 128, 1, 128, 2, 0.25f, 0}};
  double worst_vs_f32 = 0;
  for (const Case& c : cases) {
    const int64_t ar = c.ta ? c.k : c.m, ac = (c.ta ? c.m : c.k), lda = ac + c.pad;
    const int64_t br = c.tb ? c.n : c.k, bc = (c.tb ? c.k : c.n), ldb = bc + c.pad, ldc = c.n + c.pad;
    auto A = randv(ar * lda, 1 + c.m), B = randv(br * ldb, 2 + c.n), C = randv(c.m * ldc, 3 + c.k);
    std::vector<float> out = C;
    detail::gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, A.data(), lda, B.data(), ldb, c.beta, out.data(), ldc);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double exact = 0, mag = 0, f32 = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const float a = c.ta ? A[p * lda + i] : A[i * lda + p], b = c.tb ? B[j * ldb + p] : B[p * ldb + j];
          exact += (double)round_to_bf16(a) * round_to_bf16(b);
          mag += std::fabs((double)round_to_bf16(a) * round_to_bf16(b));
          f32 += (double)a * b;
        }
        const double ref = c.alpha * exact + c.beta * C[i * ldc + j];
        const double bound = (c.k + 2) * std::ldexp(1.0, -24) * (std::fabs(c.alpha) * mag + std::fabs(c.beta * C[i * ldc + j])) + 1e-30;
        ASSERT_LE(std::fabs(out[i * ldc + j] - ref), bound)
            << "case ta=" << c.ta << " tb=" << c.tb << " " << c.m << "x" << c.n << "x" << c.k << " at " << i << "," << j
            << " on " << kernel;
        worst_vs_f32 = std::max(worst_vs_f32, std::fabs(out[i * ldc + j] - (c.alpha * f32 + c.beta * C[i * ldc + j])));
      }
    for (int64_t i = 0; i < c.m; ++i)  // the padding is left alone
      for (int64_t j = c.n; j < ldc; ++j) ASSERT_EQ(out[i * ldc + j], C[i * ldc + j]);
  }
  EXPECT_GT(worst_vs_f32, 1e-2) << "the operands were not rounded to bf16";
}

// gemm_bf16_tile, flash attention's tile GEMM: on bf16 bits, run by each thread of a parallel region at once (its
// own one-thread oneDNN kernels), the exact product of the operands up to float32 accumulation's error (the
// bound of the test above); called outside a parallel region it is the same and leaves the thread count alone.
TEST(Bf16Gemm, TileGemmRunsOnEveryThreadOfAParallelRegion) {
  using Case = GemmCase;
  // attention's products (S = Q K^T with a head's stride, P V, P^T dO, dS K, dS^T Q), edges and a tiny one
  const std::vector<Case> cases = {{false, true, 128, 128, 64, 0.125f, 0, 512, 256, 128},
                                   {false, false, 128, 64, 128, 1, 1, 128, 256, 64},
                                   {true, false, 128, 64, 128, 1, 1, 128, 512, 64},
                                   {false, false, 100, 64, 77, 0.125f, 1, 128, 256, 512},
                                   {true, false, 77, 64, 100, 0.125f, 1, 128, 512, 64},
                                   {false, true, 3, 5, 7, 1, 0, 9, 8, 6}};
  auto check = [](const Case& c, int seed) {
    const int64_t ar = c.ta ? c.k : c.m, br = c.tb ? c.n : c.k;
    std::vector<uint16_t> A((size_t)(ar * c.lda)), B((size_t)(br * c.ldb));
    const std::vector<float> a = randv(A.size(), 11 + seed), b = randv(B.size(), 12 + seed);
    float_to_bf16_bits(a.data(), A.data(), (int64_t)A.size());
    float_to_bf16_bits(b.data(), B.data(), (int64_t)B.size());
    const std::vector<float> C0 = randv((size_t)(c.m * c.ldc), 13 + seed);
    std::vector<float> C = C0;
    detail::gemm_bf16_tile(c.ta, c.tb, c.m, c.n, c.k, c.alpha, A.data(), c.lda, B.data(), c.ldb, c.beta, C.data(),
                           c.ldc);
    return off_entries(
        c, [&](int64_t i, int64_t p) { return bf16_bits_to_float(c.ta ? A[p * c.lda + i] : A[i * c.lda + p]); },
        [&](int64_t p, int64_t j) { return bf16_bits_to_float(c.tb ? B[j * c.ldb + p] : B[p * c.ldb + j]); }, C0, C);
  };
  std::vector<int> bad(cases.size() * 4, -1);
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < (int64_t)bad.size(); ++t) bad[t] = check(cases[t % cases.size()], (int)t);
  for (size_t t = 0; t < bad.size(); ++t) EXPECT_EQ(bad[t], 0) << "case " << t % cases.size() << " (task " << t << ")";
  const int threads = omp_get_max_threads();
  for (size_t c = 0; c < cases.size(); ++c) EXPECT_EQ(check(cases[c], 100), 0) << "case " << c << ", one thread";
  EXPECT_EQ(omp_get_max_threads(), threads) << "the thread count changed";
}

// gemm_serial, the experts' float32 block GEMM: the product within float32 accumulation's error, the same bits
// inside a parallel region (one task per thread) and outside one, the thread count left alone; K = 0 or alpha = 0
// is C = beta C as BLAS defines it (a NaN in A never reaches C).
TEST(Gemm, SerialGemmIsOneThreadsProductWhereverItRuns) {
  using Case = GemmCase;
  // the experts' blocks (output and grad_input: 128-row blocks; grad_weight: x^T dy over all of an expert's rows)
  const std::vector<Case> cases = {{false, false, 128, 40, 48, 1, 0, 48, 40, 40},
                                   {false, true, 77, 48, 40, 1, 0, 40, 40, 48},
                                   {true, false, 48, 40, 370, 1, 0, 48, 40, 40},
                                   {false, false, 3, 5, 7, 0.5f, 1, 9, 8, 6}};
  struct Run {
    std::vector<float> A, B, C0, C;
  };
  auto run = [](const Case& c, int seed) {
    const int64_t ar = c.ta ? c.k : c.m, br = c.tb ? c.n : c.k;
    Run r{randv((size_t)(ar * c.lda), 21 + seed), randv((size_t)(br * c.ldb), 22 + seed),
          randv((size_t)(c.m * c.ldc), 23), {}};
    r.C = r.C0;
    detail::gemm_serial(c.ta, c.tb, c.m, c.n, c.k, c.alpha, r.A.data(), c.lda, r.B.data(), c.ldb, c.beta, r.C.data(),
                        c.ldc);
    return r;
  };
  const int threads = omp_get_max_threads();
  std::vector<std::vector<float>> inside(cases.size());
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < (int64_t)cases.size(); ++t) inside[t] = run(cases[t], (int)t).C;
  for (size_t t = 0; t < cases.size(); ++t) {
    const Case& c = cases[t];
    const Run out = run(c, (int)t);
    const int bad = off_entries(
        c, [&](int64_t i, int64_t p) { return c.ta ? out.A[p * c.lda + i] : out.A[i * c.lda + p]; },
        [&](int64_t p, int64_t j) { return c.tb ? out.B[j * c.ldb + p] : out.B[p * c.ldb + j]; }, out.C0, out.C);
    EXPECT_EQ(bad, 0) << "case " << t;
    EXPECT_EQ(inside[t], out.C) << "case " << t << ": other bits inside a parallel region";
  }
  EXPECT_EQ(omp_get_max_threads(), threads) << "the thread count changed";
  // K = 0 and alpha = 0: C = beta C; beta = 0 writes zeros over whatever C held
  const float nan = std::nanf("");
  std::vector<float> A(4 * 4, nan), B(4 * 4, 1.0f), C(4 * 4, 2.0f);
  detail::gemm_serial(false, false, 4, 4, 4, 0.0f, A.data(), 4, B.data(), 4, 0.5f, C.data(), 4);
  for (float v : C) EXPECT_EQ(v, 1.0f);
  C.assign(16, nan);
  detail::gemm_serial(false, false, 4, 4, 0, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
  for (float v : C) EXPECT_EQ(v, 0.0f);
}

// gemm_ordered, the FP8 GEMMs' kernel: every output is the sum of its K products in ascending k, one rounding per
// multiply-add (fused where the CPU has FMA), so a shard of the columns, a share of the rows, one thread or all of
// them, inside a parallel region or outside, give the same bits; with alpha and beta the product within float32
// accumulation's error; padding untouched; K = 0 or alpha = 0 is C = beta C (a NaN in A never reaches C).
TEST(Gemm, OrderedGemmSumsEachOutputInAscendingKWhateverTheShape) {
  using Case = GemmCase;
  const std::vector<Case> cases = {{false, true, 150, 70, 200, 1, 0, 200, 200, 70},   // x @ w^T (threads: >= 2^18)
                                   {false, false, 67, 45, 33, 1, 0, 33, 47, 48},      // edges of both tiles
                                   {true, false, 40, 130, 90, 1, 0, 40, 130, 131},    // dy^T @ x
                                   {true, true, 5, 3, 300, 1, 0, 5, 300, 3},
                                   {false, false, 9, 21, 17, -0.75f, 0.5f, 17, 21, 23},
                                   {false, true, 64, 128, 64, 1, 0, 64, 64, 128},  // OpenBLAS's shard differs here
                                   {false, true, 100, 600, 300, 1, 0, 300, 300, 600}};  // 3 column tasks, 2 K passes
  for (size_t t = 0; t < cases.size(); ++t) {
    const Case& c = cases[t];
    const int64_t ar = c.ta ? c.k : c.m, br = c.tb ? c.n : c.k;
    const std::vector<float> A = randv((size_t)(ar * c.lda), 31 + t), B = randv((size_t)(br * c.ldb), 32 + t),
                             C0 = randv((size_t)(c.m * c.ldc), 33 + t);
    auto a = [&](int64_t i, int64_t p) { return c.ta ? A[p * c.lda + i] : A[i * c.lda + p]; };
    auto b = [&](int64_t p, int64_t j) { return c.tb ? B[j * c.ldb + p] : B[p * c.ldb + j]; };
    auto run = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {  // rows [i0, i1) x columns [j0, j1) alone
      std::vector<float> C = C0;
      const float* pa = A.data() + (c.ta ? i0 : i0 * c.lda);
      const float* pb = B.data() + (c.tb ? j0 * c.ldb : j0);
      detail::gemm_ordered(c.ta, c.tb, i1 - i0, j1 - j0, c.k, c.alpha, pa, c.lda, pb, c.ldb, c.beta,
                           C.data() + i0 * c.ldc + j0, c.ldc);
      return C;
    };
    const std::vector<float> whole = run(0, c.m, 0, c.n);
    EXPECT_EQ(off_entries(c, a, b, C0, whole), 0) << "case " << t;
    if (c.alpha == 1 && c.beta == 0) {  // the definition, bit for bit
      int bad = 0;
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          float acc = 0.0f;
          for (int64_t p = 0; p < c.k; ++p) {
#if defined(__FMA__)
            acc = std::fma(a(i, p), b(p, j), acc);
#else
            acc = acc + a(i, p) * b(p, j);  // no FMA instruction to contract into
#endif
          }
          bad += bits(whole[i * c.ldc + j]) != bits(acc);
        }
      EXPECT_EQ(bad, 0) << "case " << t << ": outputs other than the ascending-k sum";
    }
    auto same_in = [&](const std::vector<float>& part, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      int bad = 0;
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.ldc; ++j) {
          const bool in = i >= i0 && i < i1 && j >= j0 && j < j1;
          bad += bits(part[i * c.ldc + j]) != bits(in ? whole[i * c.ldc + j] : C0[i * c.ldc + j]);
        }
      return bad;
    };
    EXPECT_EQ(same_in(run(0, c.m, c.n / 3, c.n), 0, c.m, c.n / 3, c.n), 0) << "case " << t << ": a column shard";
    EXPECT_EQ(same_in(run(0, c.m, 0, c.n / 2), 0, c.m, 0, c.n / 2), 0) << "case " << t << ": the first half's columns";
    EXPECT_EQ(same_in(run(c.m / 2 + 1, c.m, 0, c.n), c.m / 2 + 1, c.m, 0, c.n), 0) << "case " << t << ": a row share";
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> one = run(0, c.m, 0, c.n);
    omp_set_num_threads(threads);
    EXPECT_EQ(same_in(one, 0, c.m, 0, c.n), 0) << "case " << t << ": one thread";
    std::vector<float> inside;
#pragma omp parallel num_threads(2)
#pragma omp single
    inside = run(0, c.m, 0, c.n);
    EXPECT_EQ(same_in(inside, 0, c.m, 0, c.n), 0) << "case " << t << ": inside a parallel region";
  }
  const float nan = std::nanf("");
  std::vector<float> A(4 * 4, nan), B(4 * 4, 1.0f), C(4 * 4, 2.0f);
  detail::gemm_ordered(false, false, 4, 4, 4, 0.0f, A.data(), 4, B.data(), 4, 0.5f, C.data(), 4);
  for (float v : C) EXPECT_EQ(v, 1.0f);
  C.assign(16, nan);
  detail::gemm_ordered(false, false, 4, 4, 0, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
  for (float v : C) EXPECT_EQ(v, 0.0f);
  C.assign(16, -0.0f);  // alpha = 0, beta = 1: C untouched (its signed zeros too)
  detail::gemm_ordered(false, false, 4, 4, 4, 0.0f, A.data(), 4, B.data(), 4, 1.0f, C.data(), 4);
  for (float v : C) EXPECT_TRUE(v == 0.0f && std::signbit(v));
}

TEST(Autocast, ScopeNestsAndRefusesOtherDtypes) {
  EXPECT_EQ(AutocastScope::current(), DType::F32);
  {
    AutocastScope on(DType::BF16);
    EXPECT_EQ(AutocastScope::current(), DType::BF16);
    {
      AutocastScope off(DType::F32);
      EXPECT_EQ(AutocastScope::current(), DType::F32);
    }
    EXPECT_EQ(AutocastScope::current(), DType::BF16);
    EXPECT_FALSE(autocast_bf16(zeros({2}, DType::F64)));  // float64 (gradchecks) never autocasts
  }
  EXPECT_EQ(AutocastScope::current(), DType::F32);
  try {
    AutocastScope bad(DType::F64);
    FAIL() << "float64 autocast accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
}

namespace {
// y [N, out] = round(x W^T + b) with x, W, b rounded: what a bf16 linear computes (double reference)
std::vector<double> bf16_linear_ref(const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<float>& b, int64_t N, int64_t in, int64_t out) {
  std::vector<double> y(N * out);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = b.empty() ? 0.0 : round_to_bf16(b[j]);
      for (int64_t p = 0; p < in; ++p) s += (double)round_to_bf16(x[i * in + p]) * round_to_bf16(w[j * in + p]);
      y[i * out + j] = s;
    }
  return y;
}
Tensor from(const std::vector<float>& v, const Shape& s) {
  Tensor t = empty(s, DType::F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}
// every value bf16, and within one bf16 rounding (2^-8 relative) of the double reference
void expect_bf16_near(const Tensor& t, const std::vector<double>& ref, const char* what) {
  auto v = t.to_vector<float>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_TRUE(is_bf16(v[i])) << what << "[" << i << "] = " << v[i] << " is not a bf16 value";
    ASSERT_NEAR(v[i], ref[i], std::ldexp(std::fabs(ref[i]), -8) + 1e-4) << what << "[" << i << "]";
  }
}
}  // namespace

// linear under autocast: y, dx, dW are the bf16 GEMMs' results rounded to bf16, db the sum of the bf16 gradient;
// outside the scope the same op is float32 again.
TEST(Autocast, LinearComputesInBf16WithFloat32Accumulation) {
  const int64_t N = 33, in = 40, out = 24;
  auto xv = randv(N * in, 11), wv = randv(out * in, 12), bv = randv(out, 13), gv = randv(N * out, 14);
  Tensor x = from(xv, {N, in}).requires_grad_(true), w = from(wv, {out, in}).requires_grad_(true),
         b = from(bv, {out}).requires_grad_(true);
  Tensor y;
  {
    AutocastScope bf16(DType::BF16);
    y = linear(x, w, b);
    sum(mul(y, from(gv, {N, out}))).backward();
  }
  expect_bf16_near(y, bf16_linear_ref(xv, wv, bv, N, in, out), "y");
  // dx = g W (g rounded), dW = g^T x, db = sum of rounded g
  std::vector<double> dx(N * in, 0), dw(out * in, 0), db(out, 0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < out; ++j) {
      const double g = round_to_bf16(gv[i * out + j]);
      db[j] += g;
      for (int64_t p = 0; p < in; ++p) {
        dx[i * in + p] += g * round_to_bf16(wv[j * in + p]);
        dw[j * in + p] += g * round_to_bf16(xv[i * in + p]);
      }
    }
  expect_bf16_near(x.grad(), dx, "dx");
  expect_bf16_near(w.grad(), dw, "dW");
  expect_bf16_near(b.grad(), db, "db");
  // no scope: float32 (some output is not a bf16 value)
  Tensor y32 = linear(x, w, b);
  int not_bf16 = 0;
  for (float v : y32.to_vector<float>()) not_bf16 += !is_bf16(v);
  EXPECT_GT(not_bf16, N * out / 2);
}

// matmul (batched, shared operand) and the experts' grouped linear follow the scope; float64 never does
TEST(Autocast, MatmulAndGroupedLinearFollowTheScope) {
  AutocastScope bf16(DType::BF16);
  auto av = randv(2 * 5 * 16, 21), bv = randv(16 * 7, 22);
  Tensor a = from(av, {2, 5, 16}).requires_grad_(true), bm = from(bv, {16, 7}).requires_grad_(true);
  Tensor c = matmul(a, bm);
  std::vector<double> ref(2 * 5 * 7, 0);
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t p = 0; p < 16; ++p) ref[i * 7 + j] += (double)round_to_bf16(av[i * 16 + p]) * round_to_bf16(bv[p * 7 + j]);
  expect_bf16_near(c, ref, "matmul");
  sum(c).backward();
  for (float v : bm.grad().to_vector<float>()) ASSERT_TRUE(is_bf16(v));
  for (float v : a.grad().to_vector<float>()) ASSERT_TRUE(is_bf16(v));

  auto xv = randv(9 * 12, 31), wv = randv(3 * 12 * 8, 32);
  Tensor x = from(xv, {9, 12}).requires_grad_(true), w = from(wv, {3, 12, 8}).requires_grad_(true);
  Tensor y = grouped_linear(x, w, Tensor(), {4, 0, 5});
  std::vector<double> gref(9 * 8, 0);
  for (int64_t i = 0; i < 9; ++i) {
    const int64_t e = i < 4 ? 0 : 2;
    for (int64_t j = 0; j < 8; ++j)
      for (int64_t p = 0; p < 12; ++p)
        gref[i * 8 + j] += (double)round_to_bf16(xv[i * 12 + p]) * round_to_bf16(wv[(e * 12 + p) * 8 + j]);
  }
  expect_bf16_near(y, gref, "grouped_linear");
  sum(y).backward();
  for (float v : w.grad().to_vector<float>()) ASSERT_TRUE(is_bf16(v));

  Tensor a64 = rand_t({3, 4}, 41), b64 = rand_t({4, 2}, 42);  // float64: exact as ever
  auto c64 = matmul(a64, b64).to_vector<double>();
  auto av64 = a64.to_vector<double>(), bv64 = b64.to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int p = 0; p < 4; ++p) s += av64[i * 4 + p] * bv64[p * 2 + j];
      EXPECT_NEAR(c64[i * 2 + j], s, 1e-14);
    }
}

// A bf16 op reads its bias as bf16 and sums its bias gradient from the bf16 gradient: 1 + 2^-8 is a tie that
// rounds to 1, so y = 2^-12 + round(1 + 2^-8) = 1 + 2^-12 rounds to exactly 1 (an unrounded bias gives 1 + 2^-7),
// and the bias gradient of rows (1 + 2^-8, 2^-12) is exactly 1 (unrounded: 1 + 2^-7). Linear, the experts'
// grouped linear and the float8 linear alike.
TEST(Autocast, BiasIsReadAsBf16AndItsGradientSumsTheBf16Gradient) {
  const float tie = 1.0f + std::ldexp(1.0f, -8), small = std::ldexp(1.0f, -12);
  AutocastScope bf16(DType::BF16);
  auto check = [&](const char* what, const std::function<Tensor(const Tensor&, const Tensor&)>& op, const Tensor& b) {
    SCOPED_TRACE(what);
    Tensor x = from({1.0f, 1.0f}, {2, 1});
    Tensor y = op(x, b);  // [2, 1]
    EXPECT_EQ(y.to_vector<float>()[0], 1.0f) << "the bias was not rounded to bf16 before the add";
    sum(mul(y, from({tie, small}, {2, 1}))).backward();
    EXPECT_EQ(b.grad().to_vector<float>()[0], 1.0f) << "the bias gradient did not sum the bf16 gradient";
  };
  Tensor w = from({small}, {1, 1});
  Tensor b1 = from({tie}, {1}).requires_grad_(true);
  check("linear", [&](const Tensor& x, const Tensor& b) { return linear(x, w, b); }, b1);
  Tensor we = from({small}, {1, 1, 1});
  Tensor b2 = from({tie}, {1, 1}).requires_grad_(true);
  check("grouped_linear", [&](const Tensor& x, const Tensor& b) { return grouped_linear(x, we, b, {2}); }, b2);
  Tensor b3 = from({tie}, {1}).requires_grad_(true);
  check("float8_linear", [&](const Tensor& x, const Tensor& b) {
    return float8_linear(x, w, b, float8_casts(Float8Recipe::tensorwise));
  }, b3);
}

// Activation checkpointing recomputes a block in the precision its forward ran in, even when the backward runs
// outside the autocast scope: the gradients equal the uncheckpointed block's bit for bit.
TEST(Autocast, CheckpointRecomputesInTheForwardsPrecision) {
  auto wv = randv(16 * 24, 51), xv = randv(5 * 24, 52);
  auto grads = [&](bool ckpt) {
    Tensor w = from(wv, {16, 24}).requires_grad_(true), x = from(xv, {5, 24}).requires_grad_(true);
    Tensor y;
    {
      AutocastScope bf16(DType::BF16);
      auto block = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{silu(linear(in[0], w))}; };
      y = ckpt ? autograd::checkpoint(block, {x})[0] : block({x})[0];
    }
    sum(y).backward();  // outside the scope
    return std::make_pair(x.grad().to_vector<float>(), w.grad().to_vector<float>());
  };
  const auto plain = grads(false), ck = grads(true);
  EXPECT_EQ(plain.first, ck.first);
  EXPECT_EQ(plain.second, ck.second);
  for (float v : ck.second) ASSERT_TRUE(is_bf16(v));
}

// Attention under autocast, as PyTorch's CPU flash attention for bf16: q / k / v read as bf16 (here they arrive
// float32, as QK-norm and RoPE leave them), scores from bf16 operands summed in float32, softmax in float32, the
// probabilities rounded to bf16 for P V, the output a bf16 value; in backward dO, P and dS read as bf16 by their
// GEMMs; q / k / v's gradients bf16 values, the sinks' float32. Against an independent float64 reference of those
// roundings. With one key tile (S <= 128: the probabilities the kernel rounds are the final softmax's) the reference
// must explain the kernel far better than the same reference without the probabilities rounded; over several
// tiles (the online softmax rounds each tile's probabilities at its running maximum) within bf16's steps.
void attention_under_autocast(int64_t B, int64_t S, int64_t H, int64_t Hkv) {
  const int64_t D = 16, G = H / Hkv;
  auto mk = [](const Shape& s, uint64_t seed) { return rand_t(s, seed, DType::F32, -2, 2).requires_grad_(true); };
  Tensor q = mk({B, S, H, D}, 51), k = mk({B, S, Hkv, D}, 52), v = mk({B, S, Hkv, D}, 53), sinks = mk({H}, 54);
  Tensor Gt = rand_t({B, S, H, D}, 55, DType::F32);
  nn::AttentionVariant causal;
  Tensor out;
  {
    AutocastScope bf16(DType::BF16);
    out = nn::variant_attention(q, k, v, sinks, causal, 0, Tensor(), Tensor());
    sum(mul(out, Gt)).backward();
  }
  auto rv = [](const Tensor& t) {
    std::vector<double> r;
    for (float x : t.detach().contiguous().to_vector<float>()) r.push_back(round_to_bf16(x));
    return r;
  };
  const std::vector<double> Q = rv(q), K = rv(k), V = rv(v), dO = rv(Gt);
  const std::vector<float> sk = sinks.detach().to_vector<float>();
  const double scale = 1.0 / std::sqrt((double)D);
  struct Ref {
    std::vector<double> out, dq, dk, dv, dsinks;
  };
  // round_p: the probabilities rounded to bf16 where the kernel's GEMMs read them (false: float64 throughout)
  auto reference = [&](bool round_p) {
    auto rp = [&](double x) { return round_p ? (double)round_to_bf16((float)x) : x; };
    Ref r{std::vector<double>(q.numel()), std::vector<double>(q.numel()), std::vector<double>(k.numel()),
          std::vector<double>(v.numel()), std::vector<double>(H)};
    auto at = [&](int64_t b, int64_t s, int64_t h, int64_t nh) { return ((b * S + s) * nh + h) * D; };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t g = h / G, qi = at(b, i, h, H);
          std::vector<double> s(i + 1), P(i + 1);
          double m = sk[h];
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < D; ++c) dot += Q[qi + c] * K[at(b, j, g, Hkv) + c];
            s[j] = (double)(float)(scale * dot);  // the kernel's float32 score
            m = std::max(m, s[j]);
          }
          double l = std::exp(sk[h] - m);
          for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - m);
          std::vector<double> o(D, 0.0);
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t c = 0; c < D; ++c) o[c] += rp(std::exp(s[j] - m)) * V[at(b, j, g, Hkv) + c];
          double Di = 0;
          for (int64_t c = 0; c < D; ++c) {
            r.out[qi + c] = round_to_bf16((float)(o[c] / l));  // the bf16 output the backward reads
            Di += dO[qi + c] * r.out[qi + c];
          }
          const double lse = m + std::log(l);
          r.dsinks[h] -= std::exp(sk[h] - lse) * Di;
          for (int64_t j = 0; j <= i; ++j) {
            const int64_t kj = at(b, j, g, Hkv);
            double dP = 0;
            for (int64_t c = 0; c < D; ++c) dP += dO[qi + c] * V[kj + c];
            P[j] = std::exp(s[j] - lse);
            const double dS = rp(P[j] * (dP - Di));
            for (int64_t c = 0; c < D; ++c) {
              r.dv[kj + c] += rp(P[j]) * dO[qi + c];
              r.dq[qi + c] += scale * dS * K[kj + c];
              r.dk[kj + c] += scale * dS * Q[qi + c];
            }
          }
        }
    for (auto* t : {&r.dq, &r.dk, &r.dv})
      for (double& x : *t) x = round_to_bf16((float)x);
    return r;
  };
  const Ref flash = reference(true), plain = reference(false);
  // elements of `got` further than a bf16 step (plus float32 noise) from `want`
  auto misses = [](const Tensor& got_t, const std::vector<double>& want) {
    const std::vector<float> got = got_t.contiguous().to_vector<float>();
    double top = 0;
    for (double w : want) top = std::max(top, std::fabs(w));
    int n = 0;
    for (size_t e = 0; e < got.size(); ++e) n += std::fabs(got[e] - want[e]) > 1e-6 * top + 1e-7;
    return n;
  };
  auto near = [](const Tensor& got_t, const std::vector<double>& want, const char* what) {
    const std::vector<float> got = got_t.contiguous().to_vector<float>();
    double top = 0;
    for (double w : want) top = std::max(top, std::fabs(w));
    for (size_t e = 0; e < got.size(); ++e)
      ASSERT_LE(std::fabs(got[e] - want[e]), std::ldexp(std::fabs(want[e]), -7) + std::ldexp(top, -9))
          << what << " element " << e;
  };
  const Tensor got[] = {out, q.grad(), k.grad(), v.grad()};
  const std::vector<double>* fl[] = {&flash.out, &flash.dq, &flash.dk, &flash.dv};
  const std::vector<double>* pl[] = {&plain.out, &plain.dq, &plain.dk, &plain.dv};
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (int t = 0; t < 4; ++t) {
    for (float x : got[t].contiguous().to_vector<float>()) ASSERT_TRUE(is_bf16(x)) << what[t] << " is not bf16";
    near(got[t], *fl[t], what[t]);
    const int n = (int)got[t].numel(), mf = misses(got[t], *fl[t]), mp = misses(got[t], *pl[t]);
    std::printf("[attention bf16] %s: %d of %d elements off the flash reference, %d off the unrounded one\n",
                what[t], mf, n, mp);
    if (S <= 128) {  // all but a rounding flip in 500 (none measured), and far closer than the unrounded one
      EXPECT_LE(mf * 500, n) << what[t] << ": off the flash reference";
      EXPECT_LT(mf * 4, mp) << what[t] << ": the rounded probabilities do not explain the kernel";
    }
  }
  const std::vector<float> ds = sinks.grad().to_vector<float>();
  for (int64_t h = 0; h < H; ++h) EXPECT_NEAR(ds[h], flash.dsinks[h], 1e-4 * (1 + std::fabs(flash.dsinks[h])));
  int sink_not_bf16 = 0;
  for (float x : ds) sink_not_bf16 += !is_bf16(x);
  EXPECT_GT(sink_not_bf16, 0) << "the sinks' gradient is not rounded";
}
TEST(Autocast, AttentionRoundsItsOperandsProbabilitiesAndOutputAsFlashAttention) {
  attention_under_autocast(2, 40, 4, 2);   // one tile, the fused backward (a task per batch and KV head)
  attention_under_autocast(1, 128, 2, 1);  // one whole 128 x 128 tile, the split backward (too few such tasks)
  attention_under_autocast(2, 300, 4, 2);  // three key tiles, the last partial
}

// A real bf16 run keeps a linear's input as autocast keeps its cast: a bf16 pack, 2 bytes an element, one for
// every projection reading the same tensor (q / k / v); an input changed in place gets a pack of its own. The
// gradients are those of the float32 input rounded (the same as without the pack: LinearComputesInBf16...).
TEST(Autocast, LinearKeepsOneBf16PackOfItsInput) {
  const int64_t N = 64, in = 48, out = 16;
  auto cpu_bytes = [] { return MemoryTracker::get(Device::CPU).stats().total_current; };
  Tensor x = rand_t({N, in}, 61, DType::F32).requires_grad_(true);
  Tensor w[3] = {rand_t({out, in}, 62, DType::F32).requires_grad_(true),
                 rand_t({out, in}, 63, DType::F32).requires_grad_(true),
                 rand_t({out, in}, 64, DType::F32).requires_grad_(true)};
  AutocastScope bf16(DType::BF16);
  const int64_t before = cpu_bytes();
  Tensor y[3];
  for (int i = 0; i < 3; ++i) y[i] = linear(x, w[i]);
  const int64_t outputs = 3 * N * out * 4, pack = N * in * 2;
  EXPECT_EQ(cpu_bytes() - before, outputs + pack) << "three projections of one input: one bf16 pack";
  EXPECT_TRUE(has_bf16_pack(x));
  // changed in place: the next projection packs the new values (the old pack stays with the first three)
  {
    NoGradGuard ng;
    x.data<float>()[0] += 1.0f;
  }
  EXPECT_FALSE(has_bf16_pack(x));
  Tensor y4 = linear(x, w[0]);
  EXPECT_EQ(cpu_bytes() - before, outputs + N * out * 4 + 2 * pack);
  const float x00 = round_to_bf16(x.data<float>()[0]);
  sum(y4).backward();
  // dW[j][0] = sum over rows of g (1) times bf16(x[row][0]): row 0 carries the changed value
  double want = 0;
  for (int64_t r = 0; r < N; ++r) want += r == 0 ? x00 : round_to_bf16(x.data<float>()[r * in]);
  EXPECT_NEAR(w[0].grad().data<float>()[0], round_to_bf16((float)want), std::fabs(want) * 1e-2 + 1e-3);
  y[0] = y[1] = y[2] = y4 = Tensor();
}

// SwiGLU under bf16 autocast keeps its bf16-valued operands (gate and up: bf16 GEMMs' outputs) as packs, as
// autocast keeps its bf16 tensors: silu's input and mul's up, 2 bytes an element; silu's float32 output stays
// float32 (its values are not bf16's), and so does a parameter (a leaf lives anyway). Lossless: the gradients
// are the float32-saving run's bits.
// silu / gelu asked for a bf16 output (their input a bf16 GEMM's): under autocast the output is the float32
// result rounded to bf16 and the gradient is the derivative times the incoming gradient rounded to bf16, as
// PyTorch's ops on a bf16 tensor; outside autocast the flag changes nothing.
TEST(Autocast, SiluAndGeluAskedForBf16OutputsReturnBf16) {
  const int64_t N = 4096;
  Tensor x = rand_t({N}, 91, DType::F32, -4, 4);
  round_to_bf16_(x);
  Tensor gout = rand_t({N}, 92, DType::F32);  // off bf16's grid
  for (int act = 0; act < 2; ++act) {
    auto f = [&](const Tensor& t, bool bf16) { return act == 0 ? silu(t, bf16) : gelu(t, bf16); };
    Tensor a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true), c = x.clone().requires_grad_(true);
    Tensor ya, yc;
    {
      AutocastScope bf16(DType::BF16);
      ya = f(a, true);
      sum(mul(ya, gout)).backward();
    }
    Tensor yb = f(b, true);  // outside autocast: float32's
    Tensor g16 = gout.clone();
    round_to_bf16_(g16);
    yc = f(c, false);
    sum(mul(yc, g16)).backward();  // the float32 op on the rounded gradient
    NoGradGuard ng;
    std::vector<float> want = yc.to_vector<float>();
    int rounded = 0;
    for (float& v : want) {
      const float r = round_to_bf16(v);
      rounded += r != v;
      v = r;
    }
    EXPECT_GT(rounded, N / 2) << act;  // the float32 values are mostly off the grid: the check can fail
    EXPECT_EQ(ya.to_vector<float>(), want) << act;
    EXPECT_EQ(a.grad().to_vector<float>(), c.grad().to_vector<float>()) << act;
    EXPECT_EQ(yb.to_vector<float>(), yc.to_vector<float>()) << act;
  }
}

TEST(Autocast, ElementwiseOpsKeepBf16ValuedOperandsAsPacks) {
  const int64_t R = 64, F = 96, N = R * F;
  auto cpu_bytes = [] { return MemoryTracker::get(Device::CPU).stats().total_current; };
  auto bf16_valued = [](uint64_t seed) {
    Tensor t = rand_t({R, F}, seed, DType::F32, -3, 3);
    round_to_bf16_(t);
    return t.requires_grad_(true);
  };
  Tensor l1 = bf16_valued(71), l2 = bf16_valued(72), gout = rand_t({R, F}, 73, DType::F32);
  auto run = [&](bool autocast, int64_t* kept) {
    l1.zero_grad();
    l2.zero_grad();
    std::optional<AutocastScope> scope;
    if (autocast) scope.emplace(DType::BF16);
    Tensor z = zeros({R, F});
    const int64_t before = cpu_bytes();
    Tensor gate = add(l1, z), up = add(l2, z);  // activations holding bf16 values, as a bf16 GEMM's outputs
    Tensor act = silu(gate);
    Tensor h = mul(act, up);
    if (autocast) {
      EXPECT_TRUE(has_bf16_pack(gate));
      EXPECT_TRUE(has_bf16_pack(up));
      EXPECT_FALSE(has_bf16_pack(act));  // silu's values are float32's
    }
    gate = up = Tensor();  // what the graph keeps
    *kept = cpu_bytes() - before;
    sum(mul(h, gout)).backward();
    return std::vector<std::vector<float>>{l1.grad().to_vector<float>(), l2.grad().to_vector<float>()};
  };
  int64_t kept32 = 0, kept16 = 0;
  const auto g32 = run(false, &kept32);
  const auto g16 = run(true, &kept16);
  EXPECT_EQ(kept32, 4 * N * 4) << "gate, up, silu's output, h: float32";
  EXPECT_EQ(kept16, 2 * N * 2 + 2 * N * 4) << "gate and up as packs";
  EXPECT_EQ(g16[0], g32[0]);
  EXPECT_EQ(g16[1], g32[1]);
  // a parameter (a leaf) with bf16 values is kept as it is
  AutocastScope bf16(DType::BF16);
  Tensor y = mul(add(l2, zeros({R, F})), l1);
  EXPECT_FALSE(has_bf16_pack(l1));
  // a linear's pack of an input (rounded) is not taken by an elementwise op for values it does not hold exactly:
  // the first 64 values bf16's (they pass the first look), the rest not
  Tensor t = rand_t({R, F}, 74, DType::F32);
  for (int i = 0; i < 64; ++i) t.data<float>()[i] = round_to_bf16(t.data<float>()[i]);
  Tensor x = add(t.requires_grad_(true), zeros({R, F})), other = rand_t({R, F}, 75, DType::F32).requires_grad_(true);
  Tensor proj = linear(x, rand_t({8, F}, 76, DType::F32));
  ASSERT_TRUE(has_bf16_pack(x));  // the linear's, rounded
  sum(mul(mul(x, other), gout)).backward();
  NoGradGuard ng;
  EXPECT_EQ(other.grad().to_vector<float>(), mul(gout, x).to_vector<float>()) << "x's own values, not rounded";
}

