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

// Attention under autocast, as PyTorch's SDPA: q / k / v read as bf16 (here they arrive float32, as QK-norm and
// RoPE leave them), the kernel in float32, the output a bf16 value; q / k / v's gradients are bf16 values too.
// Bit for bit the float32 kernel on the rounded operands with its output rounded (the backward reads that
// rounded output, as flash attention reads its bf16 one), its gradients rounded. Sinks stay float32 parameters.
TEST(Autocast, AttentionReadsBf16OperandsAndRoundsItsOutput) {
  const int64_t B = 2, S = 24, H = 4, Hkv = 2, D = 16;
  auto mk = [](const Shape& s, uint64_t seed) { return rand_t(s, seed, DType::F32, -2, 2).requires_grad_(true); };
  Tensor q = mk({B, S, H, D}, 51), k = mk({B, S, Hkv, D}, 52), v = mk({B, S, Hkv, D}, 53), sinks = mk({H}, 54);
  Tensor G = rand_t({B, S, H, D}, 55, DType::F32);
  nn::AttentionVariant causal;
  Tensor out;
  {
    AutocastScope bf16(DType::BF16);
    out = nn::variant_attention(q, k, v, sinks, causal, 0, Tensor(), Tensor());
    sum(mul(out, G)).backward();
  }
  // the reference: float32 attention on rounded leaves, its output rounded in place before the backward
  auto rounded_leaf = [](const Tensor& t) {
    Tensor r = t.detach().clone();
    round_to_bf16_(r);
    return r.requires_grad_(true);
  };
  Tensor qr = rounded_leaf(q), kr = rounded_leaf(k), vr = rounded_leaf(v);
  Tensor sr = sinks.detach().clone().requires_grad_(true);
  Tensor ref = nn::variant_attention(qr, kr, vr, sr, causal, 0, Tensor(), Tensor());
  int not_bf16 = 0;
  for (float x : ref.to_vector<float>()) not_bf16 += !is_bf16(x);
  EXPECT_GT(not_bf16, (int)ref.numel() / 2) << "outside the scope the output is float32";
  round_to_bf16_(ref);
  sum(mul(ref, G)).backward();
  EXPECT_EQ(out.to_vector<float>(), ref.to_vector<float>()) << "out";
  const Tensor* got[] = {&q, &k, &v};
  const Tensor* want[] = {&qr, &kr, &vr};
  const char* what[] = {"dq", "dk", "dv"};
  for (int t = 0; t < 3; ++t) {
    Tensor w = want[t]->grad().clone();
    round_to_bf16_(w);
    EXPECT_EQ(got[t]->grad().to_vector<float>(), w.to_vector<float>()) << what[t];
  }
  EXPECT_EQ(sinks.grad().to_vector<float>(), sr.grad().to_vector<float>()) << "dsinks (float32)";
  int sink_not_bf16 = 0;
  for (float x : sinks.grad().to_vector<float>()) sink_not_bf16 += !is_bf16(x);
  EXPECT_GT(sink_not_bf16, 0) << "the sinks' gradient is not rounded";
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

