// FP8 training numerics (src/ops/float8.h) against an independent numpy model of the formats and of torchao's
// scaling (scripts/float8_reference.py -> tests/golden/float8.h5): the casts bit for bit, the scales and round
// trips bit for bit, the float8 linear's output and gradients to float32 GEMM rounding.
#include <gtest/gtest.h>

#include <bit>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <cmath>

#include "models/converters.h"
#include "models/decoder/model.h"
#include "src/autograd/checkpoint.h"
#include "src/autograd/engine.h"
#include "src/nn/layers.h"
#include "src/checkpoint/h5.h"
#include "src/ops/float8.h"
#include "src/tensor/bfloat16.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"
#include "tests/error_of.h"

namespace titan {
namespace {

h5::File golden() {
  return h5::File(std::string(TITAN_SOURCE_DIR) + "/tests/golden/float8.h5", h5::File::Read);
}

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }

// Bitwise equality of two float32 tensors (NaN == NaN of any payload); the first difference reported.
void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.contiguous().to_vector<float>(), w = want.contiguous().to_vector<float>();
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (bits(g[i]) != bits(w[i]) && bad++ == 0)
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", the reference " << w[i];
  }
  EXPECT_EQ(bad, 0) << what << ": elements differing from the reference";
}

TEST(Float8, CastsEveryValueAsTheFormatSays) {
  h5::File f = golden();
  const auto x = f.read_f32("cast/inputs").to_vector<float>();
  for (Fp8Format fmt : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const std::string name = fmt == Fp8Format::e4m3 ? "e4m3" : "e5m2";
    const auto want = f.read_i64("cast/" + name);
    ASSERT_EQ(want.size(), x.size());
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint8_t got = fp8_encode(x[i], fmt);
      if (got != (uint8_t)want[i] && bad++ < 5)
        ADD_FAILURE() << name << ": " << x[i] << " (bits 0x" << std::hex << bits(x[i]) << ") encodes to 0x" << (int)got
                      << ", the reference 0x" << want[i] << std::dec;
      // decode(encode(v)) is the round trip's value for every finite code
      const float back = fp8_decode(got, fmt);
      if (!std::isnan(back)) EXPECT_EQ(fp8_encode(back, fmt), got) << name << " " << x[i];
    }
    EXPECT_EQ(bad, 0) << name << ": values cast differently from the reference";
  }
  for (Fp8Format fmt : {Fp8Format::e4m3, Fp8Format::e5m2}) {  // every code decodes to the format's value
    const std::string name = fmt == Fp8Format::e4m3 ? "e4m3" : "e5m2";
    const auto values = f.read_f32("cast/" + name + "_values").to_vector<float>();
    ASSERT_EQ(values.size(), 256u);
    for (int code = 0; code < 256; ++code) {
      const float got = fp8_decode((uint8_t)code, fmt);
      if (std::isnan(values[code])) EXPECT_TRUE(std::isnan(got)) << name << " code " << code;
      else EXPECT_EQ(bits(got), bits(values[code])) << name << " code " << code << ": " << got << " vs " << values[code];
    }
  }
  EXPECT_EQ(fp8_max(Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8_encode(1e9f, Fp8Format::e4m3), 0x7E);   // saturated, never NaN
  EXPECT_EQ(fp8_encode(-INFINITY, Fp8Format::e5m2), 0xFB);  // saturated, never -inf
}

TEST(Float8, ScalesAndRoundTripsMatchTorchaosRecipes) {
  h5::File f = golden();
  const Tensor x = f.read_f32("scale/x");
  int cases = 0;
  for (Fp8Format fmt : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (Fp8Scaling sc : {Fp8Scaling::tensorwise, Fp8Scaling::axiswise, Fp8Scaling::mx_floor, Fp8Scaling::mx_rceil})
      for (bool pow2 : {false, true}) {
        const bool mx = sc == Fp8Scaling::mx_floor || sc == Fp8Scaling::mx_rceil;
        if (mx && pow2) continue;
        for (int axis : {0, 1}) {
          const char* sn[] = {"tensorwise", "axiswise", "mx_floor", "mx_rceil"};
          const std::string k = std::string("scale/") + (fmt == Fp8Format::e4m3 ? "e4m3" : "e5m2") + "/" +
                                sn[(int)sc] + "/" + (pow2 ? "1" : "0") + "/" + std::to_string(axis);
          const Fp8Cast c{false, fmt, sc, pow2};
          expect_bitwise(fp8_scales(x, c, axis), f.read_f32(k + "/scales"), k + " scales");
          expect_bitwise(fp8_round_trip(x, c, axis), f.read_f32(k + "/round_trip"), k + " round trip");
          ++cases;
        }
      }
  EXPECT_EQ(cases, 24);
}

// Relative error of a tensor against a reference, by the reference's largest magnitude.
double rel_err(const Tensor& got, const Tensor& want) {
  const auto g = got.contiguous().to_vector<float>(), w = want.contiguous().to_vector<float>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) num = std::max(num, std::fabs((double)g[i] - w[i])), den = std::max(den, std::fabs((double)w[i]));
  return num / std::max(den, 1e-30);
}

TEST(Float8, LinearForwardAndBackwardFollowEachRecipe) {
  h5::File f = golden();
  const Tensor x0 = f.read_f32("linear/x"), w0 = f.read_f32("linear/w"), dy = f.read_f32("linear/dy");
  for (Float8Recipe r : {Float8Recipe::tensorwise, Float8Recipe::rowwise, Float8Recipe::rowwise_with_gw_hp,
                         Float8Recipe::mxfp8, Float8Recipe::mxfp8_rceil}) {
    const std::string k = "linear/" + std::string(enum_names(Float8Recipe{})[(int)r]);
    Tensor x = x0.detach(), w = w0.detach();
    x.requires_grad_(true);
    w.requires_grad_(true);
    // x as [2, 32, K]: the op folds leading dims into the GEMM's rows
    Tensor y = float8_linear(reshape(x, {2, 32, x0.size(1)}), w, Tensor(), float8_casts(r));
    ASSERT_EQ(y.shape(), (Shape{2, 32, w0.size(0)}));
    autograd::backward({y}, {reshape(dy, {2, 32, w0.size(0)})});
    EXPECT_LT(rel_err(reshape(y, {-1, w0.size(0)}), f.read_f32(k + "/y")), 2e-6) << k;
    EXPECT_LT(rel_err(x.grad(), f.read_f32(k + "/dx")), 2e-6) << k;
    EXPECT_LT(rel_err(w.grad(), f.read_f32(k + "/dw")), 2e-6) << k;
    // FP8 is not float32: each recipe moves the output measurably away from the plain linear
    EXPECT_GT(rel_err(reshape(y, {-1, w0.size(0)}), linear(x0, w0)), 1e-4) << k;
  }
}

// The MoE experts' grouped GEMMs in FP8 (torchao's _Float8GroupedMM, rowwise): uneven groups, an empty one, an
// expert of large inputs and one of tiny weights, operands whose magnitudes make a scale along the wrong axis
// flush terms that matter (the reference's own mutants move some expert's output by 5e-2 or more: a weight
// scaled along N in the forward or along K in grad_input, x or dy scaled per column, grad_weight scales over all
// tokens, weight scales shared by the experts), each expert against the reference on its own; then with a bias
// (added and summed in float32) against the plain grouped linear's bias gradient.
TEST(Float8, GroupedLinearFollowsTorchaosFloat8GroupedGemm) {
  h5::File f = golden();
  const Tensor x0 = f.read_f32("grouped/x"), w0 = f.read_f32("grouped/w"), dy = f.read_f32("grouped/dy");
  const std::vector<int64_t> counts = f.read_i64("grouped/counts");
  const Float8Casts k = float8_casts(Float8Recipe::rowwise);
  Tensor x, w, y;
  // rowwise (torchao's _Float8GroupedMM) and MX (_MXFP8GroupedMM; the experts' 20, 33 and 11 tokens in blocks of
  // 32, the last of each zero-padded: blocks over all tokens instead move a dw by 1.1 in the reference)
  for (Float8Recipe r : {Float8Recipe::rowwise, Float8Recipe::mxfp8, Float8Recipe::mxfp8_rceil}) {
    const std::string key = "grouped/" + std::string(enum_names(Float8Recipe{})[(int)r]);
    Tensor xr = x0.detach(), wr = w0.detach();
    xr.requires_grad_(true);
    wr.requires_grad_(true);
    Tensor yr = float8_grouped_linear(xr, wr, Tensor(), counts, float8_casts(r));
    ASSERT_EQ(yr.shape(), (Shape{x0.size(0), w0.size(2)}));
    autograd::backward({yr}, {dy});
    const Tensor y_ref = f.read_f32(key + "/y"), dx_ref = f.read_f32(key + "/dx"), dw_ref = f.read_f32(key + "/dw");
    // each expert on its own (by its own largest value: the tiny expert's too), the empty one's gradient zero
    int64_t off = 0;
    for (int64_t e = 0; e < w0.size(0); ++e) {
      const int64_t n = counts[e];
      const Tensor dw = wr.grad().slice(0, e, e + 1);
      if (n == 0) {
        EXPECT_EQ(rel_err(dw, zeros(dw.shape())), 0.0) << key << " expert " << e;
        continue;
      }
      EXPECT_LT(rel_err(yr.slice(0, off, off + n), y_ref.slice(0, off, off + n)), 2e-6) << key << " y, expert " << e;
      EXPECT_LT(rel_err(xr.grad().slice(0, off, off + n), dx_ref.slice(0, off, off + n)), 2e-6)
          << key << " dx, expert " << e;
      EXPECT_LT(rel_err(dw, dw_ref.slice(0, e, e + 1)), 2e-6) << key << " dw, expert " << e;
      off += n;
    }
    if (r == Float8Recipe::rowwise) x = xr, w = wr, y = yr;
  }
  // FP8, not float32: measurably off the plain grouped linear
  EXPECT_GT(rel_err(y, grouped_linear(x0, w0, Tensor(), counts)), 1e-4);
  // with a bias: the same GEMMs, the bias added in float32 and its gradient each expert's rows of dy summed
  Generator g(4);
  Tensor b = randn({w0.size(0), w0.size(2)}, g), x2 = x0.detach(), w2 = w0.detach();
  for (Tensor* t : {&b, &x2, &w2}) t->requires_grad_(true);
  Tensor yb = float8_grouped_linear(x2, w2, b, counts, k);
  autograd::backward({yb}, {dy});
  Tensor b3 = b.detach();
  b3.requires_grad_(true);
  autograd::backward({grouped_linear(x0, w0, b3, counts)}, {dy});
  EXPECT_LT(rel_err(b.grad(), b3.grad()), 1e-6);
  EXPECT_LT(rel_err(x2.grad(), x.grad()), 1e-7);
  const auto yv = y.to_vector<float>(), ybv = yb.to_vector<float>(), bv = b.detach().to_vector<float>();
  int64_t row = 0, bad = 0;
  const int64_t N = w0.size(2);
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t i = 0; i < counts[e]; ++i, ++row)
      for (int64_t j = 0; j < N; ++j) bad += ybv[row * N + j] != yv[row * N + j] + bv[e * N + j];
  EXPECT_EQ(bad, 0) << "the bias is added to the FP8 GEMM's output in float32";
}

// Under bf16 autocast the FP8 grouped GEMMs' outputs are bf16, as torchao's output dtype is the input's: y, dx
// and dw are float32's rounded to bf16, the bias added in bf16 and its gradient the bf16 gradient summed, rounded;
// the weights are cast from their bf16 values (float8_weight: FSDP2's bf16 param_dtype hands torchao bf16 weights).
TEST(Float8, GroupedLinearUnderBf16AutocastRoundsItsOutputs) {
  Generator g(6);
  const Tensor x0 = randn({40, 32}, g), w_off = randn({3, 32, 16}, g, DType::F32, 0.2), b0 = randn({3, 16}, g);
  Tensor w0 = w_off.clone();  // the weights' bf16 values (float32 runs below read these too)
  round_to_bf16_(w0);
  const Tensor dy = randn({40, 16}, g);
  const std::vector<int64_t> counts = {12, 20, 8};
  const Float8Casts k = float8_casts(Float8Recipe::rowwise);
  auto run = [&](bool bf16, bool bias, const Tensor& w = Tensor()) {
    std::vector<Tensor> p = {x0.detach(), (w.defined() ? w : w0).detach(), b0.detach()};
    for (Tensor& t : p) t.requires_grad_(true);
    Tensor y;
    {
      std::optional<AutocastScope> ac;
      if (bf16) ac.emplace(DType::BF16);
      y = float8_grouped_linear(p[0], p[1], bias ? p[2] : Tensor(), counts, k);
      autograd::backward({y}, {dy});
    }
    return std::vector<Tensor>{y.detach(), p[0].grad(), p[1].grad(), bias ? p[2].grad() : Tensor()};
  };
  auto rounded = [](Tensor t) {
    t = t.clone();
    round_to_bf16_(t);
    return t;
  };
  const auto f32 = run(false, false), b16 = run(true, false);
  for (int i = 0; i < 3; ++i) expect_bitwise(b16[i], rounded(f32[i]), "output " + std::to_string(i));
  // weights off bf16's grid give the run of their bf16 values (y and dx; dw is each run's own gradient)
  const auto off = run(true, false, w_off);
  EXPECT_NE(w_off.to_vector<float>(), w0.to_vector<float>());
  for (int i = 0; i < 2; ++i) expect_bitwise(off[i], b16[i], "off-grid weights, output " + std::to_string(i));
  const auto with_b = run(true, true);
  const auto yv = b16[0].to_vector<float>(), ybv = with_b[0].to_vector<float>(), bv = b0.to_vector<float>();
  const auto dyv = dy.to_vector<float>();
  int64_t row = 0, bad = 0;
  std::vector<double> db(3 * 16, 0.0);
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t i = 0; i < counts[e]; ++i, ++row)
      for (int64_t j = 0; j < 16; ++j) {
        bad += ybv[row * 16 + j] != round_to_bf16(yv[row * 16 + j] + round_to_bf16(bv[e * 16 + j]));
        db[e * 16 + j] += round_to_bf16(dyv[row * 16 + j]);
      }
  EXPECT_EQ(bad, 0) << "the bias added in bf16";
  const auto dbv = with_b[3].to_vector<float>();
  for (size_t i = 0; i < db.size(); ++i)
    EXPECT_NEAR(dbv[i], round_to_bf16((float)db[i]), 1e-6 * std::fabs(db[i]) + 1e-30) << "bias grad " << i;
}

TEST(Float8, HighPrecisionCastsAreThePlainLinear) {
  Float8Casts k;  // every operand high precision
  k.input.high_precision = k.weight.high_precision = k.grad_output.high_precision = true;
  k.input_for_grad_weight = k.weight_for_grad_input = k.grad_output_for_grad_weight = k.input;
  h5::File f = golden();
  Generator g(3);
  Tensor x = f.read_f32("linear/x"), w = f.read_f32("linear/w"), b = randn({w.size(0)}, g);
  for (Tensor* t : {&x, &w, &b}) t->requires_grad_(true);
  Tensor y = float8_linear(x, w, b, k);
  Tensor dy = f.read_f32("linear/dy");
  autograd::backward({y}, {dy});
  const Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
  Tensor x2 = x.detach(), w2 = w.detach(), b2 = b.detach();
  for (Tensor* t : {&x2, &w2, &b2}) t->requires_grad_(true);
  Tensor y2 = linear(x2, w2, b2);
  autograd::backward({y2}, {dy});
  EXPECT_LT(rel_err(y, y2), 1e-6);
  EXPECT_LT(rel_err(gx, x2.grad()), 1e-6);
  EXPECT_LT(rel_err(gw, w2.grad()), 1e-6);
  EXPECT_LT(rel_err(gb, b2.grad()), 1e-6);
}

// Op-level selective checkpointing recomputes the float8 linear, casts and GEMM: the gradients (bias included) are
// those of the run without checkpointing, bit for bit.
TEST(Float8, SelectiveCheckpointingRecomputesTheSameCasts) {
  Generator g(5);
  const Tensor x0 = randn({64, 32}, g), w1 = randn({48, 32}, g, DType::F32, 0.2), w2 = randn({32, 48}, g, DType::F32, 0.2);
  const Tensor b1 = randn({48}, g), b2 = randn({32}, g), dy = randn({64, 32}, g);
  const Float8Casts k = float8_casts(Float8Recipe::rowwise);
  auto run = [&](bool ckpt) {
    std::vector<Tensor> p = {x0.detach(), w1.detach(), b1.detach(), w2.detach(), b2.detach()};
    for (Tensor& t : p) t.requires_grad_(true);
    autograd::BlockFn block = [&](const std::vector<Tensor>& in) {  // two float8 linears and a nonlinearity between
      return std::vector<Tensor>{float8_linear(silu(float8_linear(in[0], in[1], in[2], k)), in[3], in[4], k)};
    };
    Tensor y = ckpt ? autograd::checkpoint(block, p, autograd::SavePolicy::TorchTitanOps)[0] : block(p)[0];
    autograd::backward({y}, {dy});
    std::vector<Tensor> grads;
    for (Tensor& t : p) grads.push_back(t.grad());
    return grads;
  };
  const auto plain = run(false), ckpt = run(true);
  for (size_t i = 0; i < plain.size(); ++i) expect_bitwise(ckpt[i], plain[i], "grad " + std::to_string(i));
}

// TorchTitan's op-level save list holds aten.mm (every second one kept), not torchao's torch._scaled_mm: under
// op-level selective checkpointing every float8 GEMM of a block is recomputed, and float8 layers do not move
// the every-second-matmul count of the high-precision ones beside them. A block of two float8 linears and two
// float32 linears: the recompute runs both float8 forward GEMMs and the second float32 one (the first is kept).
TEST(Float8, SelectiveCheckpointingRecomputesEveryFloat8Gemm) {
  Generator g(6);
  const Tensor x0 = randn({64, 32}, g), w1 = randn({32, 32}, g, DType::F32, 0.2), dy = randn({64, 32}, g);
  const Float8Casts k = float8_casts(Float8Recipe::tensorwise);
  auto gemms = [&](bool ckpt) {
    std::vector<Tensor> p = {x0.detach(), w1.detach(), w1.detach(), w1.detach(), w1.detach()};
    for (Tensor& t : p) t.requires_grad_(true);
    autograd::BlockFn block = [&](const std::vector<Tensor>& in) {
      Tensor h = float8_linear(in[0], in[1], Tensor(), k);
      h = linear(silu(h), in[2]);
      h = float8_linear(silu(h), in[3], Tensor(), k);
      return std::vector<Tensor>{linear(silu(h), in[4])};
    };
    CostTrace trace;
    Tensor y = ckpt ? autograd::checkpoint(block, p, autograd::SavePolicy::TorchTitanOps)[0] : block(p)[0];
    autograd::backward({y}, {dy});
    std::pair<int, int> n{0, 0};  // FP8 GEMMs, high-precision GEMM kernels
    for (const CostEvent& e : trace.take())
      if (e.kind == CostEvent::Kind::Compute && e.gemm.m > 0)
        ++(e.gemm.precision == GemmPrecision::fp8 ? n.first : n.second);
    return n;
  };
  const auto plain = gemms(false), ckpt = gemms(true);
  EXPECT_EQ(plain.first, 6);               // per float8 layer: output, grad_input, grad_weight
  EXPECT_EQ(ckpt.first, plain.first + 2);  // both forward FP8 GEMMs again
  EXPECT_GT(plain.second, 0);
  EXPECT_EQ(ckpt.second, plain.second + 1);  // the second float32 forward GEMM again
}

// The converter: every linear layer but those the filter names and those whose features are not multiples of 16
// (left float32, as TorchTitan's filter leaves them); MX refuses a converted layer without whole 32-blocks.
TEST(Float8, ConverterPicksTheLinearLayers) {
  struct Net : nn::Module {
    Net() {
      a = &register_module("attn_proj", std::make_unique<nn::Linear>(32, 64, false));
      r = &register_module("router", std::make_unique<nn::Linear>(32, 8, false));  // 8 experts: not 16-aligned
      h = &register_module("lm_head", std::make_unique<nn::Linear>(64, 32, false));
    }
    nn::Linear *a, *r, *h;
  };
  Net n;
  const auto c = models::convert_to_float8(n, Float8Recipe::tensorwise, {"lm_"});
  EXPECT_EQ(c.converted, (std::vector<std::string>{"attn_proj"}));
  EXPECT_EQ(c.filtered, (std::vector<std::string>{"lm_head"}));
  EXPECT_EQ(c.unaligned, (std::vector<std::string>{"router"}));
  EXPECT_TRUE(n.a->float8.has_value());
  EXPECT_FALSE(n.r->float8.has_value());
  EXPECT_FALSE(n.h->float8.has_value());
  struct Odd : nn::Module {
    Odd() { register_module("proj", std::make_unique<nn::Linear>(48, 32, false)); }
  } odd;
  try {
    models::convert_to_float8(odd, Float8Recipe::mxfp8, {});
    FAIL() << "a 48-feature layer converted to MX";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("linear layer proj has weight [32, 48]"), std::string::npos) << e.what();
  }
}

// float8.moe_fqns_prototype: the experts modules it names run torchao's float8 grouped GEMM (rowwise); refused:
// another recipe, an entry that names no experts module
TEST(Float8, ConverterPicksTheExpertsItIsTold) {
  decoder::Args a;
  a.dim = 32;
  a.moe_num_experts = 4;
  a.moe_hidden_dim = 16;
  struct Net : nn::Module {
    explicit Net(const decoder::Args& a) {
      ex = &register_module("experts", std::make_unique<decoder::Experts>(a));
      proj = &register_module("proj", std::make_unique<nn::Linear>(32, 32, false));
    }
    decoder::Experts* ex;
    nn::Linear* proj;
  };
  Net n(a);
  models::convert_to_float8(n, Float8Recipe::rowwise, {});
  EXPECT_FALSE(n.ex->float8.has_value());  // not named: as they were
  const auto c = models::convert_to_float8(n, Float8Recipe::rowwise, {}, {"experts"});
  EXPECT_EQ(c.experts, (std::vector<std::string>{"experts"}));
  ASSERT_TRUE(n.ex->float8.has_value());
  EXPECT_TRUE(n.ex->float8->input == float8_casts(Float8Recipe::rowwise).input);
  EXPECT_TRUE(n.proj->float8.has_value());
  Net m(a);
  using testing::error_of;
  std::string e = error_of([&] { models::convert_to_float8(m, Float8Recipe::tensorwise, {}, {"experts"}); });
  EXPECT_NE(e.find("needs float8.recipe rowwise, mxfp8 or mxfp8_rceil"), std::string::npos) << e;
  e = error_of([&] { models::convert_to_float8(m, Float8Recipe::mxfp8, {"proj"}, {"experts"}); });
  EXPECT_NE(e.find("MX grouped GEMMs need both to be multiples of 32"), std::string::npos) << e;  // hidden 16
  e = error_of([&] { models::convert_to_float8(m, Float8Recipe::rowwise, {}, {"shared"}); });
  EXPECT_NE(e.find("'shared' matches no MoE experts module"), std::string::npos) << e;
  // the experts module computes through the FP8 grouped GEMM: off the plain one, as the op is
  Generator g(9);
  Net p(a);
  for (Tensor* t : {&p.ex->gate_proj, &p.ex->up_proj, &p.ex->down_proj}) *t = randn(t->shape(), g, DType::F32, 0.2);
  const Tensor x = randn({24, 32}, g);
  const std::vector<int64_t> counts = {10, 0, 6, 8};
  const Tensor plain = p.ex->forward(x, counts);
  models::convert_to_float8(p, Float8Recipe::rowwise, {}, {"experts"});
  const Tensor fp8 = p.ex->forward(x, counts);
  EXPECT_GT(rel_err(fp8, plain), 1e-4);
  EXPECT_LT(rel_err(fp8, plain), 0.1);
}

// Tensor parallel: two shards of a float8 linear, run by two threads whose amax all-reduce (max) meets in the
// middle, cast exactly as one rank does. Colwise (w cut along N): the output columns and dw rows are one rank's,
// dx the sum of the shards'; rowwise (w and x cut along K): the output the sum of the shards', dx columns and
// dw columns one rank's. Every recipe; the sums are float32 sums of two partial GEMMs (1e-6).
TEST(Float8, TensorParallelShardsCastAsOneRank) {
  struct Exchange {  // a max all-reduce of two participants, called in the same order by both
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    int64_t round = 0;
    std::vector<float> acc, result;
    void reduce(std::vector<float>& v) {
      std::unique_lock<std::mutex> l(m);
      const int64_t mine = round;
      if (arrived == 0) acc = v;
      else
        for (size_t i = 0; i < v.size(); ++i) acc[i] = std::max(acc[i], v[i]);
      if (++arrived == 2) {
        result = acc;
        arrived = 0;
        ++round;
        cv.notify_all();
      } else {
        cv.wait(l, [&] { return round != mine; });
      }
      v = result;
    }
  };
  Generator g(11);
  const int64_t M = 64, K = 64, N = 128;  // shards of 32 and 64: whole MX blocks
  const Tensor x = randn({M, K}, g), w = randn({N, K}, g, DType::F32, 0.1), dy = randn({M, N}, g, DType::F32, 0.01);
  for (Float8Recipe r : {Float8Recipe::tensorwise, Float8Recipe::rowwise, Float8Recipe::rowwise_with_gw_hp,
                         Float8Recipe::mxfp8}) {
    const std::string name(enum_names(Float8Recipe{})[(int)r]);
    auto one = [&](const Tensor& xi, const Tensor& wi, const Tensor& dyi, const Float8Casts& k) {
      Tensor a = xi.detach().contiguous(), b = wi.detach().contiguous();
      a.requires_grad_(true);
      b.requires_grad_(true);
      Tensor y = float8_linear(a, b, Tensor(), k);
      autograd::backward({y}, {dyi.contiguous()});
      return std::vector<Tensor>{y.detach(), a.grad(), b.grad()};
    };
    const auto full = one(x, w, dy, float8_casts(r));
    for (bool colwise : {true, false}) {
      Exchange ex;
      auto tp = std::make_shared<Fp8TensorParallel>();
      tp->out_sharded = colwise;
      tp->in_sharded = !colwise;
      tp->reduce_max = [&ex](std::vector<float>& v) { ex.reduce(v); };
      Float8Casts k = float8_casts(r);
      k.tp = tp;
      std::vector<std::vector<Tensor>> got(2);
      std::vector<std::string> errors(2);
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < 2; ++rank)
        ranks.emplace_back([&, rank] {
          try {
          if (colwise) {  // w rows, dy columns
            got[rank] = one(x, slice(w, 0, rank * N / 2, (rank + 1) * N / 2), slice(dy, 1, rank * N / 2, (rank + 1) * N / 2), k);
          } else {  // x and w columns
            got[rank] = one(slice(x, 1, rank * K / 2, (rank + 1) * K / 2), slice(w, 1, rank * K / 2, (rank + 1) * K / 2), dy, k);
          }
          } catch (const std::exception& e) {
            errors[rank] = e.what();
          }
        });
      for (auto& t : ranks) t.join();
      ASSERT_EQ(errors[0] + errors[1], "");
      const std::string what = name + (colwise ? " colwise" : " rowwise");
      if (colwise) {
        expect_bitwise(concat({got[0][0], got[1][0]}, 1), full[0], what + " y");
        EXPECT_LT(rel_err(add(got[0][1], got[1][1]), full[1]), 1e-6) << what << " dx";
        expect_bitwise(concat({got[0][2], got[1][2]}, 0), full[2], what + " dw");
      } else {
        EXPECT_LT(rel_err(add(got[0][0], got[1][0]), full[0]), 1e-6) << what << " y";
        expect_bitwise(concat({got[0][1], got[1][1]}, 1), full[1], what + " dx");
        expect_bitwise(concat({got[0][2], got[1][2]}, 1), full[2], what + " dw");
      }
    }
  }
}

TEST(Float8, MetaTensorsGiveShapesAndFp8GemmRecords) {
  Tensor x = empty({4, 64, 128}, DType::F32, Device::Meta), w = empty({256, 128}, DType::F32, Device::Meta);
  x.requires_grad_(true);
  w.requires_grad_(true);
  CostTrace trace;
  Tensor y = float8_linear(x, w, Tensor(), float8_casts(Float8Recipe::mxfp8));
  EXPECT_EQ(y.shape(), (Shape{4, 64, 256}));
  EXPECT_TRUE(y.is_meta());
  autograd::backward({y}, {empty({4, 64, 256}, DType::F32, Device::Meta)});
  int gemms = 0, casts = 0;
  for (const CostEvent& e : trace.events()) {
    if (e.gemm.batch > 0) {
      EXPECT_EQ(e.gemm.precision, GemmPrecision::mxfp8) << e.op;
      ++gemms;
    }
    casts += std::string(e.op) == "fp8_cast";
  }
  EXPECT_EQ(gemms, 3);  // output, grad_input, grad_weight
  EXPECT_EQ(casts, 6);
}

// torchao's rowwise recipe runs its backward GEMMs (both operands axiswise, no fast accumulation) as the tensorwise
// kernel with unit scales and multiplies the output by the scales' outer product afterwards: one elementwise kernel
// per such GEMM, over its output (read and written), recorded as a GPU runs it. The output GEMM (fast accumulation:
// the rowwise kernel scales) has none; no other recipe has any (rowwise_with_gw_hp: its grad_input's weight is
// tensorwise, its grad_weight in high precision).
TEST(Float8, RowwiseBackwardGemmsRecordTheirRescale) {
  const int64_t M = 4 * 64, K = 128, N = 256;
  for (Float8Recipe r : {Float8Recipe::tensorwise, Float8Recipe::rowwise, Float8Recipe::rowwise_with_gw_hp,
                         Float8Recipe::mxfp8}) {
    Tensor x = empty({4, 64, K}, DType::F32, Device::Meta), w = empty({N, K}, DType::F32, Device::Meta);
    x.requires_grad_(true);
    w.requires_grad_(true);
    CostTrace trace;
    Tensor y = float8_linear(x, w, Tensor(), float8_casts(r));
    autograd::backward({y}, {empty({4, 64, N}, DType::F32, Device::Meta)});
    std::vector<double> rescaled;  // each rescale's elements (its FLOPs: one multiply an element)
    for (const CostEvent& e : trace.events())
      if (std::string(e.op) == "fp8_rowwise_rescale") {
        EXPECT_EQ(e.bytes, 8.0 * e.flops) << "read and written, float32 stand-in bytes";
        rescaled.push_back(e.flops);
      }
    const std::string what = std::string(enum_names(Float8Recipe{})[(int)r]);
    if (r == Float8Recipe::rowwise) {
      EXPECT_EQ(rescaled, (std::vector<double>{(double)(M * K), (double)(N * K)})) << what << ": dx, then dw";
    } else {
      EXPECT_TRUE(rescaled.empty()) << what;
    }
  }
}

TEST(Float8, MetaGroupedLinearRecordsFp8GroupedGemms) {
  for (Float8Recipe r : {Float8Recipe::rowwise, Float8Recipe::mxfp8}) {
    Tensor x = empty({256, 64}, DType::F32, Device::Meta), w = empty({8, 64, 96}, DType::F32, Device::Meta);
    x.requires_grad_(true);
    w.requires_grad_(true);
    CostTrace trace;
    Tensor y = float8_grouped_linear(x, w, Tensor(), std::vector<int64_t>(8, 32), float8_casts(r));
    EXPECT_EQ(y.shape(), (Shape{256, 96}));
    autograd::backward({y}, {empty({256, 96}, DType::F32, Device::Meta)});
    int gemms = 0, casts = 0;
    for (const CostEvent& e : trace.events()) {
      if (e.gemm.batch > 0) {
        EXPECT_EQ(e.gemm.precision, r == Float8Recipe::mxfp8 ? GemmPrecision::mxfp8 : GemmPrecision::fp8) << e.op;
        ++gemms;
      }
      casts += std::string(e.op) == "fp8_cast";
    }
    EXPECT_EQ(gemms, 2);  // the forward's grouped GEMM, the backward's (grad_input and grad_weight)
    EXPECT_EQ(casts, 6);
  }
}

TEST(Float8, RefusesWhatItCannotCast) {
  const Tensor w = zeros({32, 48});
  try {  // MX: the contraction length must hold whole blocks
    float8_linear(zeros({32, 48}), w, Tensor(), float8_casts(Float8Recipe::mxfp8));
    FAIL() << "48 columns accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  try {
    float8_linear(zeros({8, 48}, DType::F64), zeros({32, 48}, DType::F64), Tensor(),
                  float8_casts(Float8Recipe::tensorwise));
    FAIL() << "float64 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace titan
