// FP8 numerics emulated exactly: the formats, torchao's scales, the float8 linear (float8.h).
#include "src/ops/float8.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>

#include "src/autograd/checkpoint.h"
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {
using namespace detail;

// ---- the formats -------------------------------------------------------------
namespace {
struct Format {
  int mbits, bias;
  float max;         // the largest finite value
  uint8_t max_bits;  // its bits (without the sign)
  float min_normal;  // 2^(1 - bias)
  float magic;       // 2^(1 - bias - mbits + 23): a float32 whose ulp is the subnormal quantum
};
constexpr Format spec(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Format{3, 7, 448.0f, 0x7E, 0x1p-6f, 0x1p14f}
                              : Format{2, 15, 57344.0f, 0x7B, 0x1p-14f, 0x1p7f};
}

// v rounded to the format's nearest value, ties to even, saturated at +-max (infinities too); NaN stays NaN.
// Below the smallest normal the values are multiples of the subnormal quantum 2^(1 - bias - mbits): adding a
// float32 whose ulp is that quantum rounds to them (float32's own round to nearest even; without -ffast-math
// (a + m) - m is not folded); above, dropping 23 - mbits mantissa bits with a carry that rounds to nearest even.
// Branch-free, so the casting loops vectorize.
inline float round_fp8(float v, const Format& s) {
  const float a = std::fabs(v);
  const float sub = (a + s.magic) - s.magic;
  const int shift = 23 - s.mbits;
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += ((1u << (shift - 1)) - 1) + ((b >> shift) & 1u);
  b &= ~((1u << shift) - 1);
  float r = a < s.min_normal ? sub : std::bit_cast<float>(b);
  r = a >= s.max ? s.max : r;  // saturate (the carry cannot pass max below it: max is a format value)
  r = r > s.max ? s.max : r;
  r = a != a ? a : r;          // NaN
  return std::copysign(r, v);
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

// Where x [R, C]'s scales sit: element (i, j)'s is scale (i / bi) * cols + j / bj.
struct ScaleGrid {
  int64_t rows = 1, cols = 1;  // the grid of scales: [1, 1] tensorwise, [R, 1] / [1, C] axiswise, MX blocks
  int64_t bi = 1, bj = 1;      // elements per scale along R and along C
};
ScaleGrid grid_of(const Tensor& x, const Fp8Cast& c, int axis) {
  const int64_t R = x.size(0), C = x.size(1);
  ScaleGrid g;
  if (c.scaling == Fp8Scaling::tensorwise) {
    g.bi = std::max<int64_t>(R, 1), g.bj = std::max<int64_t>(C, 1);
  } else {
    const int64_t span = is_mx(c.scaling) ? kMxBlock : (axis == 1 ? C : R);  // along the contraction axis
    g.bi = axis == 0 ? std::max<int64_t>(span, 1) : 1;
    g.bj = axis == 1 ? std::max<int64_t>(span, 1) : 1;
  }
  g.rows = (R + g.bi - 1) / g.bi, g.cols = (C + g.bj - 1) / g.bj;
  return g;
}

// max that keeps a NaN once it has seen one (torch.amax propagates NaN)
inline float nan_max(float a, float b) { return b > a || b != b ? b : a; }

// Every scale's amax (float32 |x| maxima; NaN when a NaN is among its elements), rows in parallel.
std::vector<float> amaxes(const float* p, int64_t R, int64_t C, const ScaleGrid& g) {
  std::vector<float> part((size_t)R * g.cols, 0.0f);  // each row's maximum per scale column
#pragma omp parallel for schedule(static) if (R * C >= kParallelGrain && R > 1)
  for (int64_t i = 0; i < R; ++i)
    for (int64_t jc = 0; jc < g.cols; ++jc) {
      float slot = 0;
      for (int64_t j = jc * g.bj, end = std::min(C, j + g.bj); j < end; ++j) slot = nan_max(slot, std::fabs(p[i * C + j]));
      part[i * g.cols + jc] = slot;
    }
  std::vector<float> amax((size_t)g.rows * g.cols, 0.0f);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t jc = 0; jc < g.cols; ++jc) {
      float& a = amax[(i / g.bi) * g.cols + jc];
      a = nan_max(a, part[i * g.cols + jc]);
    }
  return amax;
}

// A scale's multiplier m (the FP8 value is round(x * m)) and what the FP8 value is scaled back by.
struct GroupScale {
  float mul, back;
  bool divide;  // true: x = fp8 / back (tensorwise / axiswise: torchao's data / scale); false: fp8 * back (MX)
};
GroupScale group_scale(float amax, const Fp8Cast& c) {
  if (is_mx(c.scaling)) {
    const int e = mx_exponent(amax, c);
    return {e8m0_reciprocal(e), e8m0_value(e), false};
  }
  const float s = amax_to_scale(amax, c);
  return {s, s, true};
}

// Whether the scales span a dim the tensor-parallel group cuts (their amax is then all-reduced).
bool spans_cut(const Fp8Cast& c, int axis, bool rows_cut, bool cols_cut) {
  if (is_mx(c.scaling)) return false;  // blocks of 32 within a shard
  const bool tw = c.scaling == Fp8Scaling::tensorwise;
  return (rows_cut && (tw || axis == 0)) || (cols_cut && (tw || axis == 1));
}

std::vector<GroupScale> group_scales(const Tensor& x, const Fp8Cast& c, const ScaleGrid& g,
                                     const std::function<void(std::vector<float>&)>* reduce_max) {
  std::vector<float> amax = amaxes(x.data<float>(), x.size(0), x.size(1), g);
  if (reduce_max) (*reduce_max)(amax);
  std::vector<GroupScale> out;
  out.reserve(amax.size());
  for (float a : amax) out.push_back(group_scale(a, c));
  return out;
}
}  // namespace

Tensor fp8_scales(const Tensor& x, const Fp8Cast& c, int axis) {
  check_operand("fp8_scales", x, c, axis);
  const Tensor xc = x.contiguous();
  const ScaleGrid g = grid_of(xc, c, axis);
  std::vector<float> s;
  for (const GroupScale& gs : group_scales(xc, c, g, nullptr)) s.push_back(gs.divide ? gs.mul : gs.back);
  if (c.scaling == Fp8Scaling::tensorwise) return from_vector(s, {1});
  if (c.scaling == Fp8Scaling::axiswise) return from_vector(s, {axis == 1 ? g.rows : g.cols});
  return from_vector(s, {g.rows, g.cols});
}

Tensor fp8_round_trip(const Tensor& x, const Fp8Cast& c, int axis, bool rows_cut, bool cols_cut,
                      const std::function<void(std::vector<float>&)>* reduce_max) {
  check_operand("fp8_round_trip", x, c, axis);
  if (c.high_precision) return x;
  // an operand an FP8 wire delivered, already cast with one scale for the whole tensor: read as it is
  if (c.scaling == Fp8Scaling::tensorwise && is_fp8_operand(x, c, rows_cut || cols_cut)) return x;
  TITAN_CHECK(!(rows_cut || cols_cut) || reduce_max, "fp8_round_trip: operand ", shape_str(x.shape()),
              " is cut by a tensor-parallel group but no max all-reduce was given");
  const auto* reduce = spans_cut(c, axis, rows_cut, cols_cut) ? reduce_max : nullptr;
  // amax, then scale + cast: x read twice, one FP8 byte written (the GEMM reads it)
  record_cost("fp8_cast", 4.0 * (double)x.numel(), 2.0 * 4.0 * (double)x.numel() + (double)x.numel(),
              EagerSplit{3, 1.5});
  const int64_t R = x.size(0), C = x.size(1);
  const ScaleGrid g = grid_of(x, c, axis);
  if (x.is_meta()) {  // shapes only; the amax all-reduce still runs (priced)
    if (reduce) {
      std::vector<float> amax((size_t)(g.rows * g.cols), 0.0f);
      (*reduce)(amax);
    }
    return empty(x.shape(), DType::F32, Device::Meta);
  }
  const Tensor xc = x.contiguous();
  const std::vector<GroupScale> sc = group_scales(xc, c, g, reduce);
  Tensor out = empty({R, C}, DType::F32, x.device());
  const Format s = spec(c.format);
  const float* p = xc.data<float>();
  float* o = out.data<float>();
  const bool divide = sc.empty() || sc[0].divide;  // one rule per tensor: / scale (float8), * 2^e (MX)
#pragma omp parallel if (R * C >= kParallelGrain && R > 1)
  {
    std::vector<float> mul(g.cols == 1 ? 0 : C), back(g.cols == 1 ? 0 : C);  // a scale row spread over C
    int64_t spread = -1;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < R; ++i) {
      const float* src = p + i * C;
      float* dst = o + i * C;
      const int64_t sr = i / g.bi;
      if (g.cols == 1) {  // one scale for the row
        const float m = sc[sr].mul, k = sc[sr].back;
        if (divide)
          for (int64_t j = 0; j < C; ++j) dst[j] = round_fp8(src[j] * m, s) / k;
        else
          for (int64_t j = 0; j < C; ++j) dst[j] = round_fp8(src[j] * m, s) * k;
        continue;
      }
      if (sr != spread) {
        for (int64_t j = 0; j < C; ++j) mul[j] = sc[sr * g.cols + j / g.bj].mul, back[j] = sc[sr * g.cols + j / g.bj].back;
        spread = sr;
      }
      const float *m = mul.data(), *k = back.data();
      if (divide)
        for (int64_t j = 0; j < C; ++j) dst[j] = round_fp8(src[j] * m[j], s) / k[j];
      else
        for (int64_t j = 0; j < C; ++j) dst[j] = round_fp8(src[j] * m[j], s) * k[j];
    }
  }
  return out;
}

// ---- an operand on an FP8 wire -------------------------------------------------------
namespace {
struct OperandMark {
  const Storage* key;
  std::weak_ptr<Storage> storage;  // the mark ends with the storage (a later tensor at the same address is not it)
  int64_t offset, numel;
  Fp8Cast cast;
  bool spans_cut;
};
std::mutex g_marks_mu;
std::vector<OperandMark> g_marks;
}  // namespace

void mark_fp8_operand(const Tensor& x, const Fp8Cast& c, bool spans_cut) {
  TITAN_CHECK(c.scaling == Fp8Scaling::tensorwise && !c.high_precision, "mark_fp8_operand: only a tensorwise FP8 "
              "cast spans a whole tensor (got ", c.scaling == Fp8Scaling::axiswise ? "axiswise" : "MX", ")");
  std::lock_guard<std::mutex> lock(g_marks_mu);
  std::erase_if(g_marks, [&](const OperandMark& m) {  // the dead, and this place's earlier mark (marked anew)
    return m.storage.expired() ||
           (m.key == x.impl()->storage.get() && m.offset == x.offset() && m.numel == x.numel() && m.cast == c);
  });
  g_marks.push_back({x.impl()->storage.get(), x.impl()->storage, x.offset(), x.numel(), c, spans_cut});
}

std::optional<Fp8Cast> one_tensorwise(const std::vector<std::pair<const Fp8Cast*, const Fp8Cast*>>& uses) {
  if (uses.empty() || !uses[0].first) return std::nullopt;
  const Fp8Cast c = *uses[0].first;
  if (c.high_precision || c.scaling != Fp8Scaling::tensorwise) return std::nullopt;
  for (const auto& [a, b] : uses)
    if (!a || !b || !(*a == c) || !(*b == c)) return std::nullopt;
  return c;
}

float fp8_amax(const Tensor& x) {
  TITAN_CHECK(x.dtype() == DType::F32, "fp8_amax: a float32 tensor expected, got ", dtype_name(x.dtype()));
  if (x.numel() == 0 || x.is_meta()) return 0.0f;
  const Tensor xc = x.contiguous();
  const int64_t C = xc.size(-1), R = xc.numel() / C;
  ScaleGrid g;
  g.bi = R, g.bj = C;
  return amaxes(xc.data<float>(), R, C, g)[0];
}

bool is_fp8_operand(const Tensor& x, const Fp8Cast& c, bool cut) {
  if (!x.defined() || !x.impl()->storage || !x.is_contiguous()) return false;
  std::lock_guard<std::mutex> lock(g_marks_mu);
  for (const OperandMark& m : g_marks)
    if (m.key == x.impl()->storage.get() && m.offset == x.offset() && m.numel == x.numel() && m.cast == c &&
        (!cut || m.spans_cut) && !m.storage.expired())
      return true;
  return false;
}

Fp8Codes fp8_encode(const Tensor& x, const Fp8Cast& c, const std::function<void(std::vector<float>&)>& reduce_max) {
  check_operand("fp8_encode", x, c, 1);
  TITAN_CHECK(c.scaling == Fp8Scaling::tensorwise && !c.high_precision, "fp8_encode: an FP8 wire carries one "
              "tensorwise scale; operand ", shape_str(x.shape()), " asks for ",
              c.high_precision ? "no cast" : c.scaling == Fp8Scaling::axiswise ? "axiswise scales" : "MX blocks");
  // amax, then scale + cast: the rank's rows read twice, one byte written (what the wire moves)
  record_cost("fp8_cast", 4.0 * (double)x.numel(), 2.0 * 4.0 * (double)x.numel() + (double)x.numel(),
              EagerSplit{3, 1.5});
  const Tensor xc = x.is_meta() ? x : x.contiguous();
  const ScaleGrid g = grid_of(xc, c, 1);
  std::vector<float> amax = x.is_meta() ? std::vector<float>{0.0f} : amaxes(xc.data<float>(), x.size(0), x.size(1), g);
  if (amax.empty()) amax.assign(1, 0.0f);  // a rank holding no rows: its amax is 0, every rank reduces one value
  reduce_max(amax);  // on meta tensors too: the plan prices the all-reduce
  const GroupScale gs = group_scale(amax[0], c);
  Fp8Codes out{empty(x.shape(), DType::U8, x.device()), gs.mul};
  if (x.is_meta()) return out;
  const float* p = xc.data<float>();
  uint8_t* o = out.codes.data<uint8_t>();
  const int64_t n = x.numel();
  const float m = gs.mul;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) o[i] = fp8_encode(p[i] * m, c.format);
  return out;
}

Tensor fp8_decode(const Tensor& codes, const Fp8Cast& c, float scale) {
  TITAN_CHECK(codes.dtype() == DType::U8 && codes.dim() == 2, "fp8_decode: 2-D uint8 codes [R, C] expected, got ",
              dtype_name(codes.dtype()), " ", shape_str(codes.shape()));
  Tensor out = empty(codes.shape(), DType::F32, codes.device());
  if (!codes.is_meta()) {
    float value[256];
    for (int b = 0; b < 256; ++b) value[b] = fp8_decode((uint8_t)b, c.format);
    const Tensor cc = codes.contiguous();
    const uint8_t* p = cc.data<uint8_t>();
    float* o = out.data<float>();
    const int64_t n = codes.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = value[p[i]] / scale;  // as fp8_round_trip's round(x * s) / s
  }
  mark_fp8_operand(out, c);
  return out;
}

Tensor fp8_round_trip_groups(const Tensor& x, const Fp8Cast& c, int axis, const std::vector<int64_t>& counts) {
  // MX blocks along a group's rows: the group zero-padded to whole blocks (torchao pads token groups to 32)
  const bool pad = is_mx(c.scaling) && axis == 0;
  if (!pad) check_operand("fp8_round_trip_groups", x, c, axis);
  TITAN_CHECK(x.dtype() == DType::F32 && x.dim() == 2, "fp8_round_trip_groups: a float32 [R, C] operand expected, got ",
              dtype_name(x.dtype()), " ", shape_str(x.shape()));
  int64_t total = 0;
  for (int64_t n : counts) {
    TITAN_CHECK(n >= 0, "fp8_round_trip_groups: a negative group count (", n, ")");
    total += n;
  }
  TITAN_CHECK(total == x.size(0), "fp8_round_trip_groups: group counts sum to ", total, " but x ",
              shape_str(x.shape()), " has ", x.size(0), " rows");
  if (c.high_precision) return x;
  if (x.is_meta()) {  // the cast priced once over every group's bytes
    if (!pad) return fp8_round_trip(x, c, axis);
    int64_t padded = 0;
    for (int64_t n : counts) padded += (n + kMxBlock - 1) / kMxBlock * kMxBlock;
    fp8_round_trip(empty({padded, x.size(1)}, DType::F32, Device::Meta), c, axis);
    return empty(x.shape(), DType::F32, Device::Meta);
  }
  const Tensor xc = x.contiguous();
  Tensor out = empty(x.shape(), DType::F32, x.device());
  const int64_t C = x.size(1);
  int64_t off = 0;
  for (int64_t n : counts) {
    if (n > 0) {
      Tensor g = xc.slice(0, off, off + n).contiguous();  // [n, C]
      if (pad && n % kMxBlock != 0) {                     // [n rounded up to whole blocks, C], zeros after n
        Tensor p = zeros({(n + kMxBlock - 1) / kMxBlock * kMxBlock, C});
        std::memcpy(p.data<float>(), g.data<float>(), sizeof(float) * (size_t)(n * C));
        g = p;
      }
      const Tensor q = fp8_round_trip(g, c, axis);
      std::memcpy(out.data<float>() + off * C, q.data<float>(), sizeof(float) * (size_t)(n * C));
    }
    off += n;
  }
  return out;
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
// A GEMM whose operands are the round trips: recorded as an FP8 (or MX) GEMM unless both stay in high precision.
// Under bf16 autocast (bf16) the output is bf16 (torchao's output dtype is the input's), and a high-precision
// GEMM is a bf16 GEMM.
Tensor cast_gemm(const Tensor& a, const Tensor& b, bool fp8, bool mx, bool bf16, bool fast_accum) {
  GemmPrecisionScope scope(fp8 ? (mx ? GemmPrecision::mxfp8 : GemmPrecision::fp8) : GemmPrecision::high,
                           fp8 && !mx && !fast_accum);
  // float32 operands (FP8 round trips; a high-precision operand outside bf16 autocast) on the fixed-order GEMM: a
  // layout's shard, share or chunk of the product is one rank's bits, so the next layer's FP8 cast of it rounds
  // alike (gemm_ordered); bf16 operands on autocast's bf16 GEMM
  const bool bf16_gemm = bf16 && !fp8;
  Tensor r = matmul_forward(a, b, bf16_gemm, !bf16_gemm);
  if (bf16 && fp8) round_to_bf16_(r);
  return r;
}
}  // namespace

Tensor float8_weight(const Tensor& w, bool bf16) {
  if (!bf16 || w.is_meta()) return w;
  NoGradGuard ng;
  Tensor r = w.contiguous().clone();
  round_to_bf16_(r);
  return r;
}

Tensor float8_weight_operand(const Tensor& w, const Fp8Cast& c, bool bf16) {
  return is_fp8_operand(w, c, /*cut=*/true) ? w : float8_weight(w, bf16);
}

Tensor detail::float8_output_gemm(const Tensor& xq, const Tensor& wq, const Tensor& bias, const Float8Casts& k,
                                  bool bf16) {
  Tensor r = cast_gemm(xq, transpose(wq, 0, 1), !k.input.high_precision, k.mx, bf16, k.fast_accum[0]);  // [M, N]
  if (!bias.defined()) return r;
  Tensor b = bias;
  if (bf16) {  // the bias as the bf16 GEMM reads it
    b = bias.clone();
    round_to_bf16_(b);
  }
  r = add(r, b);
  if (bf16) round_to_bf16_(r);
  return r;
}

namespace {
// A backward GEMM whose two operands both carry axiswise scales (the rowwise recipe's grad_input and grad_weight)
// runs, in torchao, as the tensorwise cuBLAS kernel with unit scales (its rowwise CUTLASS kernel is slow without
// fast accumulation, which the backward GEMMs leave off), the output then multiplied in place by the outer product
// of the two scales (torchao/float8/float8_ops.py, addmm_float8_unwrapped: `output *= post_inverse_scale`). Titan's
// round trips apply the scales already, so nothing is computed here: that multiply is recorded as the elementwise
// kernel it is on a GPU (one multiply an element; the output read and written, in the run's activation dtype).
void record_rowwise_rescale(const Fp8Cast& a, const Fp8Cast& b, const Tensor& out) {
  if (a.high_precision || b.high_precision || a.scaling != Fp8Scaling::axiswise || b.scaling != Fp8Scaling::axiswise)
    return;
  record_cost("fp8_rowwise_rescale", (double)out.numel(), 2.0 * 4.0 * (double)out.numel());
}
}  // namespace

Tensor detail::float8_grad_input_gemm(const Tensor& dyq, const Tensor& wq, const Float8Casts& k, bool bf16) {
  Tensor dx = cast_gemm(dyq, wq, !k.grad_output.high_precision, k.mx, bf16, k.fast_accum[1]);  // [M, K]
  record_rowwise_rescale(k.grad_output, k.weight_for_grad_input, dx);
  return dx;
}

Tensor detail::float8_grad_weight_gemm(const Tensor& dyq, const Tensor& xq, const Float8Casts& k, bool bf16) {
  Tensor dw = cast_gemm(transpose(dyq, 0, 1), xq, !k.grad_output_for_grad_weight.high_precision, k.mx, bf16,
                        k.fast_accum[2]);  // [N, K]
  record_rowwise_rescale(k.grad_output_for_grad_weight, k.input_for_grad_weight, dw);
  return dw;
}

Tensor detail::float8_bias_grad(const Tensor& dy, bool bf16) {
  Tensor db = sum(dy, {0}, false);  // bf16: the bf16 gradient summed, rounded
  if (bf16 && !db.is_meta()) bias_grad_bf16(dy, db);
  return db;
}

Tensor float8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Float8Casts& k) {
  same_device("float8_linear", {&x, &w, &bias});
  TITAN_CHECK(x.dtype() == DType::F32 && w.dtype() == DType::F32, "float8_linear: float32 input and weight expected, got ",
              dtype_name(x.dtype()), " ", shape_str(x.shape()), " and ", dtype_name(w.dtype()), " ", shape_str(w.shape()));
  TITAN_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "float8_linear: input ", shape_str(x.shape()),
              " last dim must equal the weight's in_features (weight ", shape_str(w.shape()), ")");
  TITAN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), "float8_linear: bias ",
              shape_str(bias.shape()), " must be [", w.size(0), "] for weight ", shape_str(w.shape()));
  // a tensor-parallel shard: x [M, K] cut along K (rowwise), w [N, K] along N (colwise) or K, dy [M, N] along N
  const bool out_cut = k.tp && k.tp->out_sharded, in_cut = k.tp && k.tp->in_sharded;
  const std::function<void(std::vector<float>&)>* reduce = k.tp ? &k.tp->reduce_max : nullptr;
  const bool bf16 = autocast_bf16(x);
  Tensor x2, y;
  Shape os = x.shape();
  os.back() = w.size(0);
  {
    NoGradGuard ng;
    x2 = reshape(x, {-1, x.size(-1)}).contiguous();  // [M, K]
    TITAN_CHECK(!k.mx || x2.size(0) % kMxBlock == 0, "float8_linear: MX recipes need the tokens of a micro-batch (",
                x2.size(0), " rows of ", shape_str(x.shape()), ") to be a multiple of ", kMxBlock,
                " (grad_weight's blocks run along them); choose local_batch_size x seq_len accordingly");
    Tensor y2 = autograd::sac_forward(autograd::SacOp::ScaledMatmul, [&] {
      const Tensor xq = fp8_round_trip(x2, k.input, 1, false, in_cut, reduce);  // along K
      const Tensor wq = fp8_round_trip(float8_weight_operand(w, k.weight, bf16), k.weight, 1, out_cut, in_cut, reduce);
      return float8_output_gemm(xq, wq, bias, k, bf16);  // [M, N]
    });
    y = reshape(y2, os);
  }
  const bool gx = x.requires_grad(), gw = w.requires_grad(), has_b = bias.defined();
  std::vector<Tensor> inputs = {x, w};
  if (has_b) inputs.push_back(bias);
  return record("float8_linear", inputs, y,
                [xs = saved(x2), ws = saved(w), xshape = x.shape(), has_b, gx, gw, k, bf16](const std::vector<Tensor>& g) {
                  const Tensor dy = reshape(g[0], {-1, g[0].size(-1)}).contiguous();  // [M, N]
                  Tensor dx, dw, db;
                  const bool out_cut = k.tp && k.tp->out_sharded, in_cut = k.tp && k.tp->in_sharded;
                  const auto* reduce = k.tp ? &k.tp->reduce_max : nullptr;
                  if (gx) {  // dx [M, K] = q(dy, along N) @ q(w, along N)
                    const Tensor dyq = fp8_round_trip(dy, k.grad_output, 1, false, out_cut, reduce);
                    const Tensor wq =
                        fp8_round_trip(float8_weight_operand(ws, k.weight_for_grad_input, bf16), k.weight_for_grad_input,
                                       0, out_cut, in_cut, reduce);
                    dx = reshape(float8_grad_input_gemm(dyq, wq, k, bf16), xshape);
                  }
                  if (gw) {  // dw [N, K] = q(dy, along M)^T @ q(x, along M)
                    const Tensor dyq = fp8_round_trip(dy, k.grad_output_for_grad_weight, 0, false, out_cut, reduce);
                    const Tensor xq = fp8_round_trip(xs, k.input_for_grad_weight, 0, false, in_cut, reduce);
                    dw = float8_grad_weight_gemm(dyq, xq, k, bf16);
                  }
                  if (has_b) db = float8_bias_grad(dy, bf16);
                  std::vector<Tensor> out = {dx, dw};
                  if (has_b) out.push_back(db);
                  return out;
                });
}

// ---- the float8 grouped linear (MoE experts) ------------------------------------------
namespace {
// y [R, N] += b [E, N] on each expert's rows; bf16: the bias as the bf16 GEMM reads it and the sum rounded, as
// float8_linear adds its bias
void add_expert_bias(Tensor& y, const Tensor& b, const std::vector<int64_t>& counts, bool bf16) {
  record_cost("float8_grouped_bias", (double)y.numel(), 2.0 * (double)y.nbytes() + (double)b.nbytes());
  if (y.is_meta()) return;
  const int64_t N = y.size(1);
  const Tensor bc = b.contiguous();
  float* py = y.data<float>();
  const float* pb = bc.data<float>();
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t i = 0; i < counts[e]; ++i, ++row)
      for (int64_t j = 0; j < N; ++j) {
        const float v = py[row * N + j] + (bf16 ? round_to_bf16(pb[e * N + j]) : pb[e * N + j]);
        py[row * N + j] = bf16 ? round_to_bf16(v) : v;
      }
}

// db [E, N]: each expert's rows of dy [R, N] summed in float32 (bf16: the bf16 gradient summed, rounded)
Tensor expert_bias_grad(const Tensor& dy, const std::vector<int64_t>& counts, bool bf16) {
  const int64_t E = (int64_t)counts.size(), N = dy.size(1);
  Tensor db = zeros({E, N}, DType::F32, dy.device());
  record_cost("float8_grouped_bias_backward", (double)dy.numel(), (double)dy.nbytes() + (double)db.nbytes());
  if (dy.is_meta()) return db;
  const float* pg = dy.data<float>();
  float* pdb = db.data<float>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < counts[e]; ++i, ++row)
      for (int64_t j = 0; j < N; ++j) pdb[e * N + j] += bf16 ? round_to_bf16(pg[row * N + j]) : pg[row * N + j];
  if (bf16) round_to_bf16_(db);
  return db;
}

GemmPrecision precision_of(const Fp8Cast& a, bool mx) {
  return a.high_precision ? GemmPrecision::high : mx ? GemmPrecision::mxfp8 : GemmPrecision::fp8;
}
}  // namespace

Tensor float8_grouped_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& counts,
                             const Float8Casts& k) {
  const char* op = "float8_grouped_linear";
  check_grouped_linear(op, x, w, b, counts);
  TITAN_CHECK(x.dtype() == DType::F32, op, ": float32 input and weight expected, got ", dtype_name(x.dtype()), " ",
              shape_str(x.shape()));
  TITAN_CHECK(!k.tp, op, ": the experts' FP8 casts have no tensor-parallel form (a scale would span a cut dim)");
  const int64_t E = w.size(0), K = w.size(1), N = w.size(2);
  // MX: K and N in whole blocks (only the tokens of a group are zero-padded to blocks, by fp8_round_trip_groups;
  // the weight's groups are its experts' K rows, which must not be)
  TITAN_CHECK(!k.mx || (K % kMxBlock == 0 && N % kMxBlock == 0), op, ": MX blocks of ", kMxBlock,
              " need the weight's K and N to be multiples of ", kMxBlock, "; w is ", shape_str(w.shape()));
  const std::vector<int64_t> per_expert(E, K);  // w as [E * K, N]: expert e's K rows
  const bool bf16 = autocast_bf16(x);
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  Tensor y;
  {
    NoGradGuard ng;
    const Tensor xq = fp8_round_trip(xc, k.input, 1);                                              // [R, K]
    const Tensor wq =
        fp8_round_trip_groups(float8_weight(wc, bf16).reshape({E * K, N}), k.weight, 0, per_expert).reshape({E, K, N});
    GemmPrecisionScope scope(precision_of(k.input, k.mx));
    y = grouped_linear_forward(xq, wq, Tensor(), counts, false);  // [R, N]
    if (bf16 && !y.is_meta()) round_to_bf16_(y);                  // torchao's output dtype is the input's
    if (b.defined()) add_expert_bias(y, b, counts, bf16);
  }
  std::vector<Tensor> inputs = {xc, wc};
  if (b.defined()) inputs.push_back(b);
  return record(op, inputs, y,
                [xs = saved(xc), ws = saved(wc), has_b = b.defined(), counts, k, bf16, E, K,
                 N](const std::vector<Tensor>& g) {
                  const Tensor dy = g[0].contiguous();  // [R, N]
                  // dx: dy per token along N, w per (e, k) along N; dw: x and dy per column over each expert's tokens
                  const Tensor dyq = fp8_round_trip(dy, k.grad_output, 1);
                  const Tensor wq = fp8_round_trip(float8_weight(ws, bf16).reshape({E * K, N}), k.weight_for_grad_input, 1)
                                        .reshape({E, K, N});
                  const Tensor xq = fp8_round_trip_groups(xs, k.input_for_grad_weight, 0, counts);
                  const Tensor dyq_w = fp8_round_trip_groups(dy, k.grad_output_for_grad_weight, 0, counts);
                  std::vector<Tensor> r;
                  {
                    GemmPrecisionScope scope(precision_of(k.grad_output, k.mx));
                    r = grouped_linear_backward(dyq, xq, wq, false, counts, false, dyq_w);  // {dx, dw, -}
                  }
                  if (bf16 && !dy.is_meta()) {
                    round_to_bf16_(r[0]);
                    round_to_bf16_(r[1]);
                  }
                  std::vector<Tensor> out = {r[0], r[1]};
                  if (has_b) out.push_back(expert_bias_grad(dy, counts, bf16));
                  return out;
                });
}

}  // namespace titan
