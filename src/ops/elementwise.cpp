// Elementwise ops: broadcasting binary ops, comparisons, where, unary math.
#include <Eigen/Core>
#include <cmath>

#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {
using namespace detail;

// ---- binary ----------------------------------------------------------------
namespace {
enum class Bin { Add, Sub, Mul, Div, Eq, Lt, Gt };

template <Bin op, typename T>
inline auto bin_apply(T a, T b) {
  if constexpr (op == Bin::Add) return a + b;
  if constexpr (op == Bin::Sub) return a - b;
  if constexpr (op == Bin::Mul) return a * b;
  if constexpr (op == Bin::Div) return a / b;
  if constexpr (op == Bin::Eq) return a == b;
  if constexpr (op == Bin::Lt) return a < b;
  if constexpr (op == Bin::Gt) return a > b;
}

template <Bin op, typename T, typename O>
void binary_kernel(const Tensor& a, const Tensor& b, const Tensor& out) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  O* po = out.data<O>();
  const int64_t n = out.numel();
  if (a.shape() == out.shape() && b.shape() == out.shape() && a.is_contiguous() && b.is_contiguous()) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = bin_apply<op>(pa[i], pb[i]);
    return;
  }
  Shape sa = broadcast_strides(a.shape(), a.strides(), out.shape());
  Shape sb = broadcast_strides(b.shape(), b.strides(), out.shape());
  nd_rows<3>(out.shape(), {out.strides().data(), sa.data(), sb.data()},
             [&](const std::array<int64_t, 3>& base, int64_t len, const std::array<int64_t, 3>& in) {
               O* o = po + base[0];
               const T* x = pa + base[1];
               const T* y = pb + base[2];
               if (in[1] == 1 && in[2] == 1) {
                 for (int64_t i = 0; i < len; ++i) o[i] = bin_apply<op>(x[i], y[i]);
               } else if (in[1] == 1 && in[2] == 0) {
                 const T yv = *y;
                 for (int64_t i = 0; i < len; ++i) o[i] = bin_apply<op>(x[i], yv);
               } else {
                 for (int64_t i = 0; i < len; ++i) o[i] = bin_apply<op>(x[i * in[1]], y[i * in[2]]);
               }
             });
}

const char* bin_name(Bin op) {
  switch (op) {
    case Bin::Add: return "add";
    case Bin::Sub: return "sub";
    case Bin::Mul: return "mul";
    case Bin::Div: return "div";
    case Bin::Eq: return "eq";
    case Bin::Lt: return "lt";
    case Bin::Gt: return "gt";
  }
  return "?";
}

template <Bin op>
Tensor binary_forward(const Tensor& a, const Tensor& b) {
  const char* name = bin_name(op);
  Device dev = same_device(name, {&a, &b});
  same_dtype(name, a, b);
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  constexpr bool cmp = op == Bin::Eq || op == Bin::Lt || op == Bin::Gt;
  Tensor out = empty(s, cmp ? DType::Bool : a.dtype(), dev);
  record_cost(name, (double)out.numel(), bytes_of({&a, &b, &out}));
  if (dev == Device::Meta) return out;
  if constexpr (cmp) {
    dispatch_all(a.dtype(), name, [&]<typename T>() { binary_kernel<op, T, bool>(a, b, out); });
  } else {
    dispatch_float(a.dtype(), name, [&]<typename T>() { binary_kernel<op, T, T>(a, b, out); });
  }
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<Bin::Add>(a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record("add", {a, b}, out, [sa, sb](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sa), sum_to(g[0], sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<Bin::Sub>(a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record("sub", {a, b}, out, [sa, sb](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sa), neg(sum_to(g[0], sb))};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<Bin::Mul>(a, b);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  if (!autograd::grad_enabled() || !(ga || gb)) return out;
  // each operand is kept for the other's gradient only; under bf16 autocast a bf16-valued one as its pack
  return record("mul", {a, b}, out,
                [sa = a.shape(), sb = b.shape(), ka = gb ? saved_maybe_bf16(a) : Tensor(),
                 kb = ga ? saved_maybe_bf16(b) : Tensor(), ga, gb](const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{ga ? sum_to(mul(g[0], unpack_bf16(kb)), sa) : Tensor(),
                                             gb ? sum_to(mul(g[0], unpack_bf16(ka)), sb) : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<Bin::Div>(a, b);
  bool gb = b.requires_grad();
  return record("div", {a, b}, out,
                [sa = a.shape(), sb = saved(b), so = gb ? saved(out) : Tensor(), gb](const std::vector<Tensor>& g) {
                  Tensor ga = sum_to(div(g[0], sb), sa);
                  return std::vector<Tensor>{ga, gb ? neg(sum_to(mul(g[0], div(so, sb)), sb.shape())) : Tensor()};
                });
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_forward<Bin::Eq>(a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_forward<Bin::Lt>(a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_forward<Bin::Gt>(a, b); }

namespace {
template <typename F>
Tensor scalar_map(const char* name, const Tensor& a, F f) {
  need_float(name, a);
  Tensor ac = a.contiguous();
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  record_cost(name, (double)out.numel(), bytes_of({&a, &out}));
  if (a.is_meta()) return out;
  dispatch_float(a.dtype(), name, [&]<typename T>() {
    const T* x = ac.data<T>();
    T* y = out.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  });
  return out;
}
}  // namespace

Tensor add(const Tensor& a, double s) {
  Tensor out = scalar_map("add_scalar", a, [s](auto x) { return x + static_cast<decltype(x)>(s); });
  return record("add_scalar", {a}, out, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = scalar_map("mul_scalar", a, [s](auto x) { return x * static_cast<decltype(x)>(s); });
  return record("mul_scalar", {a}, out,
                [s](const std::vector<Tensor>& g) { return std::vector<Tensor>{mul(g[0], s)}; });
}

void add_(const Tensor& dst, const Tensor& src) {
  TITAN_CHECK(dst.shape() == src.shape(), "add_: shape mismatch, dst ", shape_str(dst.shape()), " src ",
              shape_str(src.shape()));
  same_dtype("add_", dst, src);
  same_device("add_", {&dst, &src});
  TITAN_CHECK(dst.is_contiguous(), "add_: destination must be contiguous");
  record_cost("add_", (double)dst.numel(), 3.0 * (double)dst.nbytes());
  if (dst.is_meta()) return;
  Tensor s = src.contiguous();
  dispatch_float(dst.dtype(), "add_", [&]<typename T>() {
    T* d = dst.data<T>();
    const T* x = s.data<T>();
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) d[i] += x[i];
  });
}

void mul_(const Tensor& dst, double s) {
  TITAN_CHECK(dst.is_contiguous(), "mul_: destination must be contiguous");
  record_cost("mul_", (double)dst.numel(), 2.0 * (double)dst.nbytes());
  if (dst.is_meta()) return;
  dispatch_float(dst.dtype(), "mul_", [&]<typename T>() {
    T* d = dst.data<T>();
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) d[i] *= static_cast<T>(s);
  });
}

// ---- where -----------------------------------------------------------------
namespace {
Tensor where_forward(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Device dev = same_device("where", {&cond, &a, &b});
  TITAN_CHECK(cond.dtype() == DType::Bool, "where: condition must be bool, got ", dtype_name(cond.dtype()));
  same_dtype("where", a, b);
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(s, a.dtype(), dev);
  record_cost("where", (double)out.numel(), bytes_of({&cond, &a, &b, &out}));
  if (dev == Device::Meta) return out;
  Shape sc = broadcast_strides(cond.shape(), cond.strides(), s);
  Shape sa = broadcast_strides(a.shape(), a.strides(), s);
  Shape sb = broadcast_strides(b.shape(), b.strides(), s);
  dispatch_all(a.dtype(), "where", [&]<typename T>() {
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    nd_rows<4>(s, {out.strides().data(), sc.data(), sa.data(), sb.data()},
               [&](const std::array<int64_t, 4>& bs, int64_t n, const std::array<int64_t, 4>& in) {
                 for (int64_t i = 0; i < n; ++i)
                   po[bs[0] + i * in[0]] = pc[bs[1] + i * in[1]] ? pa[bs[2] + i * in[2]] : pb[bs[3] + i * in[3]];
               });
  });
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = where_forward(cond, a, b);
  return record("where", {a, b}, out,
                [c = saved(cond), sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
                  Tensor z = zeros({}, g[0].dtype(), g[0].device());
                  return std::vector<Tensor>{sum_to(where_forward(c, g[0], z), sa),
                                             sum_to(where_forward(c, z, g[0]), sb)};
                });
}

// ---- unary -----------------------------------------------------------------
namespace {
enum class U { Exp, Log, Sqrt, Rsqrt, Pow, Neg, Abs, Silu, Gelu, Sigmoid, Tanh, Clamp, Cos, Sin };

// FLOPs per element counted for each forward (backward: one more).
constexpr double kUnaryFlops[] = {1, 1, 1, 2, 1, 1, 1, 4, 8, 3, 1, 1, 1, 1};
const char* kUnaryNames[] = {"exp", "log", "sqrt", "rsqrt", "pow", "neg", "abs", "silu", "gelu", "sigmoid", "tanh", "clamp", "cos", "sin"};
const char* kUnaryBwdNames[] = {"exp_backward",  "log_backward",     "sqrt_backward", "rsqrt_backward",
                                "pow_backward",  "neg_backward",     "abs_backward",  "silu_backward",
                                "gelu_backward", "sigmoid_backward", "tanh_backward", "clamp_backward",
                                "cos_backward",  "sin_backward"};

template <U op, typename T>
inline T ufwd(T x, T p0, T p1) {
  if constexpr (op == U::Exp) return std::exp(x);
  if constexpr (op == U::Log) return std::log(x);
  if constexpr (op == U::Sqrt) return std::sqrt(x);
  if constexpr (op == U::Rsqrt) return T(1) / std::sqrt(x);
  if constexpr (op == U::Pow) return std::pow(x, p0);
  if constexpr (op == U::Neg) return -x;
  if constexpr (op == U::Abs) return std::abs(x);
  if constexpr (op == U::Silu) return x / (T(1) + std::exp(-x));
  if constexpr (op == U::Gelu) return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
  if constexpr (op == U::Sigmoid) return T(1) / (T(1) + std::exp(-x));
  if constexpr (op == U::Tanh) return std::tanh(x);
  if constexpr (op == U::Clamp) return x < p0 ? p0 : (x > p1 ? p1 : x);
  if constexpr (op == U::Cos) return std::cos(x);
  if constexpr (op == U::Sin) return std::sin(x);
}

// d/dx given x and y = f(x)
template <U op, typename T>
inline T uderiv(T x, T y, T p0, T p1) {
  if constexpr (op == U::Exp) return y;
  if constexpr (op == U::Log) return T(1) / x;
  if constexpr (op == U::Sqrt) return T(0.5) / y;
  if constexpr (op == U::Rsqrt) return T(-0.5) * y * y * y;
  if constexpr (op == U::Pow) return p0 * std::pow(x, p0 - T(1));
  if constexpr (op == U::Neg) return T(-1);
  if constexpr (op == U::Abs) return x > 0 ? T(1) : (x < 0 ? T(-1) : T(0));
  if constexpr (op == U::Silu) {
    T s = T(1) / (T(1) + std::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
  if constexpr (op == U::Gelu) {
    const T inv_sqrt_2pi = T(0.3989422804014327);
    return T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2))) + x * inv_sqrt_2pi * std::exp(T(-0.5) * x * x);
  }
  if constexpr (op == U::Sigmoid) return y * (T(1) - y);
  if constexpr (op == U::Tanh) return T(1) - y * y;
  if constexpr (op == U::Clamp) return (x >= p0 && x <= p1) ? T(1) : T(0);
  if constexpr (op == U::Cos) return -std::sin(x);
  if constexpr (op == U::Sin) return std::cos(x);
}

// f(i0, len) over [0, n) in chunks, across OpenMP threads when large.
template <typename F>
void eigen_chunks(int64_t n, F&& f) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// bf16_out (float32 only): the output rounded to bf16 in the same pass, as a bf16 tensor's op returns it.
template <U op>
Tensor unary_forward(const Tensor& x, double p0, double p1, bool bf16_out = false) {
  const char* name = kUnaryNames[(int)op];
  need_float(name, x);
  Tensor xc = x.contiguous();
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  record_cost(name, kUnaryFlops[(int)op] * (double)x.numel(), bytes_of({&x, &out}));
  if (x.is_meta()) return out;
  dispatch_float(x.dtype(), name, [&]<typename T>() {
    const T* px = xc.data<T>();
    T* py = out.data<T>();
    const int64_t n = x.numel();
    if constexpr (std::is_same_v<T, float> && (op == U::Exp || op == U::Silu || op == U::Sigmoid || op == U::Tanh)) {
      // Eigen's vectorized exp / logistic / tanh (AVX-512): the scalar libm loop does not vectorize
      eigen_chunks(n, [&](int64_t i0, int64_t len) {
        Eigen::Map<const Eigen::ArrayXf> xa(px + i0, len);
        Eigen::Map<Eigen::ArrayXf> ya(py + i0, len);
        if constexpr (op == U::Exp) ya = xa.exp();
        if constexpr (op == U::Silu) ya = xa * xa.logistic();
        if constexpr (op == U::Sigmoid) ya = xa.logistic();
        if constexpr (op == U::Tanh) ya = xa.tanh();
        if (bf16_out) round_to_bf16(py + i0, len);
      });
      return;
    }
    const T a = static_cast<T>(p0), b = static_cast<T>(p1);
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) py[i] = ufwd<op, T>(px[i], a, b);
    if constexpr (std::is_same_v<T, float>)
      if (bf16_out) round_to_bf16_(out);
  });
  return out;
}

// Whether an op's derivative reads its output y (uderiv): its backward keeps y only then.
template <U op>
constexpr bool derivative_reads_y() {
  return op == U::Exp || op == U::Sqrt || op == U::Rsqrt || op == U::Sigmoid || op == U::Tanh;
}

// bf16_grad: g is the gradient of a bf16 output: read rounded to bf16, as a bf16 tensor's gradient is.
template <U op>
Tensor unary_backward(const Tensor& g, const Tensor& x, const Tensor& y, double p0, double p1, bool bf16_grad = false) {
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  record_cost(kUnaryBwdNames[(int)op], (kUnaryFlops[(int)op] + 1) * (double)x.numel(),
              derivative_reads_y<op>() ? bytes_of({&g, &x, &y, &out}) : bytes_of({&g, &x, &out}));
  if (x.is_meta()) return out;
  Tensor gc = bf16_grad && g.dtype() == DType::F32 ? rounded_to_bf16(g) : g.contiguous();
  dispatch_float(x.dtype(), kUnaryBwdNames[(int)op], [&]<typename T>() {
    const T* px = x.data<T>();
    const T* py = derivative_reads_y<op>() ? y.data<T>() : nullptr;
    const T* pg = gc.data<T>();
    T* po = out.data<T>();
    const int64_t n = x.numel();
    if constexpr (std::is_same_v<T, float> && op == U::Silu) {  // s * (1 + x (1 - s)), s = logistic(x), vectorized
      eigen_chunks(n, [&](int64_t i0, int64_t len) {
        Eigen::Map<const Eigen::ArrayXf> xa(px + i0, len), ga(pg + i0, len);
        Eigen::Map<Eigen::ArrayXf> oa(po + i0, len);
        const Eigen::ArrayXf sg = xa.logistic();
        oa = ga * sg * (1.0f + xa * (1.0f - sg));
      });
      return;
    }
    const T a = static_cast<T>(p0), b = static_cast<T>(p1);
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = pg[i] * uderiv<op, T>(px[i], derivative_reads_y<op>() ? py[i] : T(0), a, b);
  });
  return out;
}

// bf16_out: x is a bf16 tensor under autocast (the caller knows: a bf16 GEMM's output), so the op returns a bf16
// tensor as PyTorch's does: computed in float32, rounded, and its incoming gradient read rounded.
template <U op>
Tensor unary(const Tensor& x, double p0 = 0, double p1 = 0, bool bf16_out = false) {
  bf16_out = bf16_out && autocast_bf16(x) && !x.is_meta();
  Tensor y = unary_forward<op>(x, p0, p1, bf16_out);
  if (!autograd::grad_enabled() || !x.requires_grad()) return y;
  // the derivative reads x (uderiv): under bf16 autocast a bf16-valued x (silu's gate) is kept as its pack;
  // the others keep x as the alias it is. y is kept where the derivative reads it.
  constexpr bool reads_x = !(op == U::Exp || op == U::Sqrt || op == U::Rsqrt || op == U::Neg || op == U::Sigmoid ||
                             op == U::Tanh);
  constexpr bool reads_y = derivative_reads_y<op>();
  Tensor xc = x.contiguous();
  return record(kUnaryNames[(int)op], {x}, y,
                [xs = reads_x ? saved_maybe_bf16(xc) : saved(xc), ys = reads_y ? saved(y) : Tensor(), p0, p1,
                 bf16_out](const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{unary_backward<op>(g[0], unpack_bf16(xs), ys, p0, p1, bf16_out)};
                });
}
}  // namespace

Tensor exp(const Tensor& x) { return unary<U::Exp>(x); }
Tensor log(const Tensor& x) { return unary<U::Log>(x); }
Tensor sqrt(const Tensor& x) { return unary<U::Sqrt>(x); }
Tensor rsqrt(const Tensor& x) { return unary<U::Rsqrt>(x); }
Tensor pow(const Tensor& x, double p) { return unary<U::Pow>(x, p); }
Tensor neg(const Tensor& x) { return unary<U::Neg>(x); }
Tensor abs(const Tensor& x) { return unary<U::Abs>(x); }
Tensor silu(const Tensor& x, bool bf16_out) { return unary<U::Silu>(x, 0, 0, bf16_out); }
Tensor gelu(const Tensor& x, bool bf16_out) { return unary<U::Gelu>(x, 0, 0, bf16_out); }
Tensor sigmoid(const Tensor& x) { return unary<U::Sigmoid>(x); }
Tensor tanh(const Tensor& x) { return unary<U::Tanh>(x); }
Tensor cos(const Tensor& x) { return unary<U::Cos>(x); }
Tensor sin(const Tensor& x) { return unary<U::Sin>(x); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  TITAN_CHECK(lo <= hi, "clamp: lower bound ", lo, " exceeds upper bound ", hi);
  return unary<U::Clamp>(x, lo, hi);
}

}  // namespace titan
