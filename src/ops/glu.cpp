// gpt-oss's expert activation, fused: the clamped SwiGLU on the experts' interleaved gate / up projection
// (HF's gate_up_proj layout: gate at even, up at odd columns). Forward and backward are one pass each; the
// composite it replaces (two slices and their copies, clamp, clamp, mul, sigmoid, mul, add, mul, and a backward
// of each) made ~16 passes over [R, I] in small steps. Its float operations are the composite's, in its order:
// the same bits. The eager pricing keeps that chain's kernels and traffic.
#include <Eigen/Core>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
// per element e of [N] (N = rows x I): gate x[2e], up x[2e + 1]
template <typename T>
struct Glu {
  T alpha, limit;  // limit <= 0: no clamping
  T gate(T g0) const { return limit > 0 && g0 > limit ? limit : g0; }
  T up(T u0) const { return limit > 0 ? (u0 < -limit ? -limit : (u0 > limit ? limit : u0)) : u0; }
  bool gate_passes(T g0) const { return limit <= 0 || g0 <= limit; }           // clamp's gradient mask
  bool up_passes(T u0) const { return limit <= 0 || (u0 >= -limit && u0 <= limit); }
};

// s[0..n) = sigmoid(alpha * g[0..n)): Eigen's vectorized logistic for float32 (as sigmoid()), else the formula
template <typename T>
void sigmoid_of(const T* g, T alpha, T* s, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    Eigen::Map<const Eigen::ArrayXf> ga(g, n);
    Eigen::Map<Eigen::ArrayXf> sa(s, n);
    sa = (ga * alpha).logistic();
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] = T(1) / (T(1) + std::exp(-(g[i] * alpha)));
  }
}

constexpr int64_t kChunk = 1024;

// body(c, len, g, s) over chunks of the n outputs (threads split the chunks), with each chunk's clamped gates
// g[0..len) and s = sigmoid(alpha g) computed: the pass forward and backward share
template <typename T, typename Body>
void glu_chunks(const Glu<T>& f, const T* px, int64_t n, Body&& body) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    alignas(64) T g[kChunk], s[kChunk];
    for (int64_t i = 0; i < len; ++i) g[i] = f.gate(px[2 * (c + i)]);
    sigmoid_of(g, f.alpha, s, len);
    body(c, len, g, s);
  }
}

// x [.., 2I] contiguous -> y [.., I]
Tensor glu_forward(const Tensor& x, double alpha, double limit) {
  Shape os = x.shape();
  os.back() /= 2;
  Tensor y = empty(os, x.dtype(), x.device());
  // eager: clamp, clamp, mul, sigmoid, mul, add, mul over [.., I] plus the slices' copies
  record_cost("clamped_swiglu", 8.0 * (double)y.numel(), bytes_of({&x, &y}), EagerSplit{9, 5.0});
  if (x.is_meta()) return y;
  dispatch_float(x.dtype(), "clamped_swiglu", [&]<typename T>() {
    const Glu<T> f{T(alpha), T(limit)};
    const T* px = x.data<T>();
    T* py = y.data<T>();
    glu_chunks(f, px, y.numel(), [&](int64_t c, int64_t len, const T* g, const T* s) {
      for (int64_t i = 0; i < len; ++i) py[c + i] = (f.up(px[2 * (c + i) + 1]) + T(1)) * (g[i] * s[i]);
    });
  });
  return y;
}

// dy [.., I], x [.., 2I] -> dx [.., 2I] (interleaved like x)
Tensor glu_backward(const Tensor& dy, const Tensor& x, double alpha, double limit) {
  Tensor dx = empty(x.shape(), x.dtype(), x.device());
  record_cost("clamped_swiglu_backward", 12.0 * (double)dy.numel(), bytes_of({&dy, &x, &dx}), EagerSplit{10, 5.0});
  if (x.is_meta()) return dx;
  Tensor gc = dy.contiguous();
  dispatch_float(x.dtype(), "clamped_swiglu_backward", [&]<typename T>() {
    const Glu<T> f{T(alpha), T(limit)};
    const T* px = x.data<T>();
    const T* pg = gc.data<T>();
    T* pd = dx.data<T>();
    glu_chunks(f, px, dy.numel(), [&](int64_t c, int64_t len, const T* g, const T* s) {
      for (int64_t i = 0; i < len; ++i) {
        const T g0 = px[2 * (c + i)], u0 = px[2 * (c + i) + 1], d = pg[c + i];
        const T gi = g[i], si = s[i];
        // the composite's own float operations in its order (its gradients to the bit): y = a b, a = u + 1,
        // b = g s, s = sigmoid(t), t = alpha g; g's two paths summed; then the clamps' masks
        const T a = f.up(u0) + T(1), b = gi * si;
        const T da = d * b, db = d * a;
        const T dt = db * gi * (si * (T(1) - si));
        const T dg = db * si + dt * f.alpha;
        // + 0: the composite adds the two slices' zero-filled gradients (-0 + 0 = +0 where a clamp masks)
        pd[2 * (c + i)] = dg * (f.gate_passes(g0) ? T(1) : T(0)) + T(0);
        pd[2 * (c + i) + 1] = da * (f.up_passes(u0) ? T(1) : T(0)) + T(0);
      }
    });
  });
  return dx;
}
}  // namespace

Tensor clamped_swiglu(const Tensor& gate_up, double alpha, double limit) {
  need_float("clamped_swiglu", gate_up);
  TITAN_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0, "clamped_swiglu: the last dim of ",
              shape_str(gate_up.shape()), " must hold interleaved gate / up pairs (an even size)");
  Tensor xc = gate_up.contiguous();
  Tensor y = glu_forward(xc, alpha, limit);
  return record("clamped_swiglu", {xc}, y, [xs = saved(xc), alpha, limit](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{glu_backward(g[0], xs, alpha, limit)};
  });
}

}  // namespace titan
