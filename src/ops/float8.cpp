// FP8 numerics emulated exactly: the formats, torchao's scales, the float8 linear (float8.h).
#include "src/ops/float8.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "src/autograd/checkpoint.h"
#include "src/ops/common.h"

namespace titan {
using namespace detail;

// ---- the formats -------------------------------------------------------------
namespace {
struct Format {
  int mbits, bias;
  float max;         // the largest finite value
  uint8_t max_bits;  // its bits (without the sign)
};
constexpr Format spec(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Format{3, 7, 448.0f, 0x7E} : Format{2, 15, 57344.0f, 0x7B};
}

// |v| (finite, below the format's max) rounded to the format's nearest value, ties to even. Below the smallest
// normal the values are multiples of the subnormal quantum 2^(1 - bias - mbits): adding a float32 whose ulp is
// that quantum rounds to them (float32's own round to nearest even); above, dropping 23 - mbits mantissa bits
// with a carry that rounds to nearest even.
inline float round_magnitude(float a, const Format& s) {
  const float min_normal = std::ldexp(1.0f, 1 - s.bias);
  if (a < min_normal) {
    const float magic = std::ldexp(1.0f, 1 - s.bias - s.mbits + 23);
    volatile float t = a + magic;  // volatile: the compiler must not fold (a + m) - m to a
    return t - magic;
  }
  const int shift = 23 - s.mbits;
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += ((1u << (shift - 1)) - 1) + ((b >> shift) & 1u);
  b &= ~((1u << shift) - 1);
  return std::bit_cast<float>(b);
}

// v rounded to the format, saturated at +-max (infinities too); NaN stays NaN.
inline float round_fp8(float v, const Format& s) {
  if (std::isnan(v)) return v;
  const float a = std::fabs(v);
  const float r = a >= s.max ? s.max : std::min(round_magnitude(a, s), s.max);
  return std::signbit(v) ? -r : r;
}
}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "float8_e4m3fn" : "float8_e5m2"; }
float fp8_max(Fp8Format f) { return spec(f).max; }

uint8_t fp8_encode(float v, Fp8Format f) {
  const Format s = spec(f);
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return sign | 0x7F;
  const float r = std::fabs(round_fp8(v, s));
  if (r == 0) return sign;
  int e;
  std::frexp(r, &e);  // r = m 2^e, m in [0.5, 1)
  const int exp = e - 1;
  if (exp < 1 - s.bias)  // subnormal: r = mant 2^(1 - bias - mbits)
    return sign | (uint8_t)std::lround(std::ldexp(r, s.bias - 1 + s.mbits));
  const int mant = (int)std::lround(std::ldexp(r, s.mbits - exp)) - (1 << s.mbits);
  return sign | (uint8_t)(((exp + s.bias) << s.mbits) | mant);
}

float fp8_decode(uint8_t bits, Fp8Format f) {
  const Format s = spec(f);
  const bool neg = bits & 0x80;
  const int exp = (bits & 0x7F) >> s.mbits, mant = bits & ((1 << s.mbits) - 1);
  float v;
  if (f == Fp8Format::e4m3 && exp == 15 && mant == 7) {
    v = NAN;
  } else if (f == Fp8Format::e5m2 && exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else if (exp == 0) {
    v = std::ldexp((float)mant, 1 - s.bias - s.mbits);
  } else {
    v = std::ldexp(1.0f + (float)mant / (float)(1 << s.mbits), exp - s.bias);
  }
  return neg ? -v : v;
}

// ---- scales and the round trip -------------------------------------------------
namespace {
bool is_mx(Fp8Scaling s) { return s == Fp8Scaling::mx_floor || s == Fp8Scaling::mx_rceil; }

// torchao's amax_to_scale: max / max(amax, 1e-12) in float64, to float32; optionally down to a power of two
// (torchao: exp2(floor(log2(scale)))), computed exactly here from the float32's exponent.
float amax_to_scale(float amax, const Fp8Cast& c) {
  const double d = (double)fp8_max(c.format) / std::max((double)amax, 1e-12);
  float s = (float)d;
  if (c.pow2_scales && std::isfinite(s) && s > 0) {
    int e;
    std::frexp(s, &e);
    s = std::ldexp(1.0f, e - 1);
  }
  return s;
}

// MX: the biased e8m0 exponent of a block with this amax (torchao's to_mx: floor, or _to_mx_rceil), 255 = NaN.
int mx_exponent(float amax, const Fp8Cast& c) {
  if (!std::isfinite(amax)) return 255;
  const int emax = c.format == Fp8Format::e4m3 ? 8 : 15;  // floor(log2(max))
  if (c.scaling == Fp8Scaling::mx_floor) {
    const int unbiased = (int)((std::bit_cast<uint32_t>(amax) >> 23) & 0xFF) - 127 - emax;
    return std::clamp(unbiased, -127, 128) + 127;
  }
  const float descale = amax * (1.0f / fp8_max(c.format));  // rceil: round descale up to a power of two
  const uint32_t b = std::bit_cast<uint32_t>(descale);
  const int biased = (int)((b >> 23) & 0xFF);
  const uint32_t mant = b & 0x7FFFFF;
  const bool up = biased == 0 ? mant > 0x400000 : mant != 0;
  return std::min(biased + (up ? 1 : 0), 255);
}
// 2^(biased - 127) and its reciprocal, exactly (2^-127 is a float32 subnormal); NaN for 255.
float e8m0_value(int biased) { return biased == 255 ? NAN : std::ldexp(1.0f, biased - 127); }
float e8m0_reciprocal(int biased) { return biased == 255 ? NAN : std::ldexp(1.0f, 127 - biased); }

void check_operand(const char* op, const Tensor& x, const Fp8Cast& c, int axis) {
  TITAN_CHECK(x.dtype() == DType::F32, op, ": float32 operand expected, got ", dtype_name(x.dtype()), " ",
              shape_str(x.shape()));
  TITAN_CHECK(x.dim() == 2, op, ": a 2-D operand [R, C] expected, got ", shape_str(x.shape()));
  TITAN_CHECK(axis == 0 || axis == 1, op, ": axis must be 0 or 1, got ", axis);
  TITAN_CHECK(!is_mx(c.scaling) || x.size(axis) % kMxBlock == 0, op, ": MX blocks of ", kMxBlock,
              " need the contraction length to be a multiple of ", kMxBlock, "; operand ", shape_str(x.shape()),
              " has ", x.size(axis), " along axis ", axis, " (a float8 recipe without MX, or a size that divides)");
}

// The groups one scale spans, as rows of a [G, L] view of x laid out with the contraction axis last.
struct Groups {
  Tensor rows;  // [R, C] contiguous with the contraction axis last (x, or x^T copied)
  int64_t group = 0;  // elements per scale within a row (C: axiswise; kMxBlock: MX; all: tensorwise)
};
Groups groups_of(const Tensor& x, const Fp8Cast& c, int axis) {
  Groups g;
  g.rows = axis == 1 ? x.contiguous() : transpose(x, 0, 1).contiguous();
  const int64_t C = g.rows.size(1);
  g.group = c.scaling == Fp8Scaling::tensorwise ? g.rows.numel() : is_mx(c.scaling) ? kMxBlock : C;
  return g;
}

float amax_of(const float* p, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(p[i]));  // NaN: fabs(NaN) compares false (skipped)
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(p[i])) return NAN;
  return m;
}

// Every group's multiplier m (the FP8 value is round(x * m)) and its inverse (what the FP8 value is scaled back by).
struct GroupScale {
  float mul, back;  // tensorwise / axiswise: mul = scale, back: divide by scale (torchao: data / scale)
  bool divide;      // true: x = fp8 / back; false: x = fp8 * back (MX)
};
GroupScale group_scale(const float* p, int64_t n, const Fp8Cast& c) {
  const float amax = amax_of(p, n);
  if (is_mx(c.scaling)) {
    const int e = mx_exponent(amax, c);
    return {e8m0_reciprocal(e), e8m0_value(e), false};
  }
  const float s = amax_to_scale(amax, c);
  return {s, s, true};
}
}  // namespace

Tensor fp8_scales(const Tensor& x, const Fp8Cast& c, int axis) {
  check_operand("fp8_scales", x, c, axis);
  Groups g = groups_of(x, c, axis);
  const int64_t n = g.rows.numel(), ng = n / std::max<int64_t>(g.group, 1);
  Shape os = c.scaling == Fp8Scaling::tensorwise ? Shape{1}
             : c.scaling == Fp8Scaling::axiswise ? Shape{x.size(1 - axis)}
             : axis == 1                         ? Shape{x.size(0), x.size(1) / kMxBlock}
                                                 : Shape{x.size(0) / kMxBlock, x.size(1)};
  std::vector<float> s(ng);
  const float* p = g.rows.data<float>();
  for (int64_t i = 0; i < ng; ++i) {
    const GroupScale gs = group_scale(p + i * g.group, g.group, c);
    s[i] = gs.divide ? gs.mul : gs.back;
  }
  Tensor out = from_vector(s, {ng});
  if (is_mx(c.scaling) && axis == 0) return transpose(reshape(out, {x.size(1), x.size(0) / kMxBlock}), 0, 1).contiguous();
  return reshape(out, os);
}

Tensor fp8_round_trip(const Tensor& x, const Fp8Cast& c, int axis) {
  check_operand("fp8_round_trip", x, c, axis);
  if (c.high_precision) return x;
  // amax, then scale + cast: x read twice, one FP8 byte written (the GEMM reads it)
  record_cost("fp8_cast", 4.0 * (double)x.numel(), 2.0 * 4.0 * (double)x.numel() + (double)x.numel(),
              EagerSplit{3, 1.5});
  if (x.is_meta()) return empty(x.shape(), DType::F32, Device::Meta);
  Groups g = groups_of(x, c, axis);
  Tensor out = empty(g.rows.shape(), DType::F32, x.device());
  const Format s = spec(c.format);
  const int64_t n = g.rows.numel(), ng = n / std::max<int64_t>(g.group, 1);
  const float* p = g.rows.data<float>();
  float* o = out.data<float>();
  auto cast_group = [&](int64_t i) {
    const float* src = p + i * g.group;
    float* dst = o + i * g.group;
    const GroupScale gs = group_scale(src, g.group, c);
    for (int64_t j = 0; j < g.group; ++j) {
      const float q = round_fp8(src[j] * gs.mul, s);
      dst[j] = gs.divide ? q / gs.back : q * gs.back;
    }
  };
  if (c.scaling == Fp8Scaling::tensorwise) {  // one scale: parallel over elements
    const GroupScale gs = group_scale(p, n, c);
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t j = 0; j < n; ++j) o[j] = round_fp8(p[j] * gs.mul, s) / gs.back;
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain && ng > 1)
    for (int64_t i = 0; i < ng; ++i) cast_group(i);
  }
  return axis == 1 ? out : transpose(out, 0, 1).contiguous();
}

// ---- recipes -------------------------------------------------------------------
Float8Casts float8_casts(Float8Recipe r) {
  Float8Casts k;
  const Fp8Cast e4m3_tw{false, Fp8Format::e4m3, Fp8Scaling::tensorwise, false};
  const Fp8Cast e4m3_row{false, Fp8Format::e4m3, Fp8Scaling::axiswise, true};
  switch (r) {
    case Float8Recipe::tensorwise:
      k.input = k.weight = e4m3_tw;
      k.grad_output = {false, Fp8Format::e5m2, Fp8Scaling::tensorwise, false};
      k.input_for_grad_weight = k.input;
      k.weight_for_grad_input = k.weight;
      k.grad_output_for_grad_weight = k.grad_output;
      break;
    case Float8Recipe::rowwise:
      k.input = k.weight = k.grad_output = e4m3_row;
      k.input_for_grad_weight = k.weight_for_grad_input = k.grad_output_for_grad_weight = e4m3_row;
      break;
    case Float8Recipe::rowwise_with_gw_hp:
      k.input = k.weight = k.grad_output = e4m3_row;
      k.weight_for_grad_input = {false, Fp8Format::e4m3, Fp8Scaling::tensorwise, true};
      k.input_for_grad_weight = k.grad_output_for_grad_weight = {true, Fp8Format::e4m3, Fp8Scaling::tensorwise, false};
      break;
    case Float8Recipe::mxfp8:
    case Float8Recipe::mxfp8_rceil: {
      const Fp8Cast mx{false, Fp8Format::e4m3,
                       r == Float8Recipe::mxfp8 ? Fp8Scaling::mx_floor : Fp8Scaling::mx_rceil, false};
      k.input = k.weight = k.grad_output = mx;
      k.input_for_grad_weight = k.weight_for_grad_input = k.grad_output_for_grad_weight = mx;
      k.mx = true;
      break;
    }
  }
  return k;
}

// ---- the float8 linear ---------------------------------------------------------
namespace {
// A GEMM whose operands are the round trips: recorded as an FP8 (or MX) GEMM unless both stay float32.
Tensor cast_gemm(const Tensor& a, const Tensor& b, bool fp8, bool mx) {
  GemmPrecisionScope scope(fp8 ? (mx ? GemmPrecision::mxfp8 : GemmPrecision::fp8) : GemmPrecision::high);
  return matmul_forward(a, b);
}
}  // namespace

Tensor float8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Float8Casts& k) {
  same_device("float8_linear", {&x, &w, &bias});
  TITAN_CHECK(x.dtype() == DType::F32 && w.dtype() == DType::F32, "float8_linear: float32 input and weight expected, got ",
              dtype_name(x.dtype()), " ", shape_str(x.shape()), " and ", dtype_name(w.dtype()), " ", shape_str(w.shape()));
  TITAN_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "float8_linear: input ", shape_str(x.shape()),
              " last dim must equal the weight's in_features (weight ", shape_str(w.shape()), ")");
  TITAN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), "float8_linear: bias ",
              shape_str(bias.shape()), " must be [", w.size(0), "] for weight ", shape_str(w.shape()));
  Tensor x2, y;
  Shape os = x.shape();
  os.back() = w.size(0);
  {
    NoGradGuard ng;
    x2 = reshape(x, {-1, x.size(-1)}).contiguous();  // [M, K]
    TITAN_CHECK(!k.mx || x2.size(0) % kMxBlock == 0, "float8_linear: MX recipes need the tokens of a micro-batch (",
                x2.size(0), " rows of ", shape_str(x.shape()), ") to be a multiple of ", kMxBlock,
                " (grad_weight's blocks run along them); choose local_batch_size x seq_len accordingly");
    Tensor y2 = autograd::sac_forward(autograd::SacOp::Matmul, [&] {
      const Tensor xq = fp8_round_trip(x2, k.input, 1), wq = fp8_round_trip(w, k.weight, 1);  // along K
      Tensor r = cast_gemm(xq, transpose(wq, 0, 1), !k.input.high_precision, k.mx);            // [M, N]
      return bias.defined() ? add(r, bias) : r;
    });
    y = reshape(y2, os);
  }
  const bool gx = x.requires_grad(), gw = w.requires_grad(), has_b = bias.defined();
  std::vector<Tensor> inputs = {x, w};
  if (has_b) inputs.push_back(bias);
  return record("float8_linear", inputs, y,
                [xs = saved(x2), ws = saved(w), xshape = x.shape(), has_b, gx, gw, k](const std::vector<Tensor>& g) {
                  const Tensor dy = reshape(g[0], {-1, g[0].size(-1)}).contiguous();  // [M, N]
                  Tensor dx, dw, db;
                  if (gx) {  // dx [M, K] = q(dy, along N) @ q(w, along N)
                    const Tensor dyq = fp8_round_trip(dy, k.grad_output, 1);
                    const Tensor wq = fp8_round_trip(ws, k.weight_for_grad_input, 0);
                    dx = reshape(cast_gemm(dyq, wq, !k.grad_output.high_precision, k.mx), xshape);
                  }
                  if (gw) {  // dw [N, K] = q(dy, along M)^T @ q(x, along M)
                    const Tensor dyq = fp8_round_trip(dy, k.grad_output_for_grad_weight, 0);
                    const Tensor xq = fp8_round_trip(xs, k.input_for_grad_weight, 0);
                    dw = cast_gemm(transpose(dyq, 0, 1), xq, !k.grad_output_for_grad_weight.high_precision, k.mx);
                  }
                  if (has_b) db = sum(dy, {0}, false);
                  std::vector<Tensor> out = {dx, dw};
                  if (has_b) out.push_back(db);
                  return out;
                });
}

}  // namespace titan
