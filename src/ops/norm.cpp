// Fused RMSNorm and LayerNorm over the last dim. Forward saves the per-row
// reciprocal std (and mean); backward is one pass per row.
#include <cmath>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
void check_norm(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  same_device(op, {&x, &w, &b});
  need_float(op, x);
  same_dtype(op, x, w);
  TITAN_CHECK(x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight ", shape_str(w.shape()),
              " must be [", (x.dim() ? x.size(-1) : 0), "] for input ", shape_str(x.shape()));
  if (b.defined())
    TITAN_CHECK(b.shape() == w.shape() && b.dtype() == x.dtype(), op, ": bias ", shape_str(b.shape()),
                " must match weight ", shape_str(w.shape()));
}
}  // namespace

// ---- RMSNorm: y = x * rstd * w, rstd = (mean(x^2) + eps)^-1/2 ---------------
namespace {
std::pair<Tensor, Tensor> rms_norm_forward(const Tensor& x, const Tensor& w, double eps) {
  const int64_t H = x.size(-1), R = H ? x.numel() / H : 0;
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = empty({R}, x.dtype(), x.device());
  // eager (TorchTitan's module): float(), pow, mean, add eps, rsqrt, mul, type_as, mul weight
  record_cost("rms_norm", 4.0 * (double)x.numel(), bytes_of({&x, &w, &y, &rstd}), EagerSplit{8, 8.0});
  if (x.is_meta()) return {y, rstd};
  dispatch_float(x.dtype(), "rms_norm", [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    T* pr = rstd.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = px + r * H;
      T* yr = py + r * H;
      T ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < H; ++j) ss += xr[j] * xr[j];
      T rs = T(1) / std::sqrt(ss / T(H) + T(eps));
      pr[r] = rs;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) yr[j] = pw[j] * (xr[j] * rs);
    }
  });
  return {y, rstd};
}

// dx = rstd * (g*w - xhat * mean(g*w*xhat)), dw = sum_rows(g * xhat), xhat = x*rstd
std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  const int64_t H = x.size(-1), R = H ? x.numel() / H : 0;
  Tensor dx = empty(x.shape(), x.dtype(), x.device());
  Tensor dw = zeros(w.shape(), w.dtype(), w.device());
  record_cost("rms_norm_backward", 8.0 * (double)x.numel(), bytes_of({&g, &x, &w, &dx, &dw}),
              EagerSplit{10, 8.0});  // eager: autograd of the forward's chain, float32 intermediates
  if (x.is_meta()) return {dx, dw};
  Tensor gc = g.contiguous();
  dispatch_float(x.dtype(), "rms_norm_backward", [&]<typename T>() {
    const T* pg = gc.data<T>();
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pr = rstd.data<T>();
    T* pdx = dx.data<T>();
    T* pdw = dw.data<T>();
    const int nt = omp_get_max_threads();
    std::vector<T> partial((size_t)nt * H, T(0));  // per-thread dw, summed in thread order
#pragma omp parallel num_threads(nt) if (x.numel() >= kParallelGrain)
    {
      T* my = partial.data() + (size_t)omp_get_thread_num() * H;
#pragma omp for schedule(static)
      for (int64_t r = 0; r < R; ++r) {
        const T* gr = pg + r * H;
        const T* xr = px + r * H;
        T* dr = pdx + r * H;
        const T rs = pr[r];
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < H; ++j) dot += gr[j] * pw[j] * xr[j];
        const T c = dot * rs * rs / T(H);
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          dr[j] = rs * (gr[j] * pw[j] - xr[j] * c);
          my[j] += gr[j] * xr[j] * rs;
        }
      }
    }
    for (int t = 0; t < nt; ++t)
      for (int64_t j = 0; j < H; ++j) pdw[j] += partial[(size_t)t * H + j];
  });
  return {dx, dw};
}
}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_norm("rms_norm", x, weight, Tensor());
  Tensor xc = x.contiguous(), wc = weight.contiguous();
  auto [y, rstd] = rms_norm_forward(xc, wc, eps);
  return record("rms_norm", {xc, wc}, y,
                [xs = saved(xc), ws = saved(wc), rs = saved(rstd)](const std::vector<Tensor>& g) {
                  auto [dx, dw] = rms_norm_backward(g[0], xs, ws, rs);
                  return std::vector<Tensor>{dx, dw};
                });
}

// ---- LayerNorm: y = (x - mean) * rstd * w + b -------------------------------
namespace {
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t H = x.size(-1), R = H ? x.numel() / H : 0;
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  Tensor mu = empty({R}, x.dtype(), x.device());
  Tensor rstd = empty({R}, x.dtype(), x.device());
  record_cost("layer_norm", 6.0 * (double)x.numel(), bytes_of({&x, &w, &b, &y, &mu, &rstd}),
              EagerSplit{2, 2.0});  // eager: native_layer_norm + cast
  if (x.is_meta()) return {y, mu, rstd};
  dispatch_float(x.dtype(), "layer_norm", [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = px + r * H;
      T* yr = py + r * H;
      T m = 0;
      for (int64_t j = 0; j < H; ++j) m += xr[j];
      m /= T(H);
      T v = 0;
      for (int64_t j = 0; j < H; ++j) v += (xr[j] - m) * (xr[j] - m);
      const T rs = T(1) / std::sqrt(v / T(H) + T(eps));
      mu.data<T>()[r] = m;
      rstd.data<T>()[r] = rs;
      for (int64_t j = 0; j < H; ++j) yr[j] = (xr[j] - m) * rs * pw[j] + (pb ? pb[j] : T(0));
    }
  });
  return {y, mu, rstd};
}

// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), dw = sum(g*xhat), db = sum(g)
std::vector<Tensor> layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& mu,
                                        const Tensor& rstd, bool has_bias) {
  const int64_t H = x.size(-1), R = H ? x.numel() / H : 0;
  Tensor dx = empty(x.shape(), x.dtype(), x.device());
  Tensor dw = zeros(w.shape(), w.dtype(), w.device());
  Tensor db = has_bias ? zeros(w.shape(), w.dtype(), w.device()) : Tensor();
  record_cost("layer_norm_backward", 10.0 * (double)x.numel(), bytes_of({&g, &x, &w, &dx, &dw, &db}),
              EagerSplit{3, 2.0});
  if (x.is_meta()) return {dx, dw, db};
  Tensor gc = g.contiguous();
  dispatch_float(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const T* pg = gc.data<T>();
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* pdx = dx.data<T>();
    T* pdw = dw.data<T>();
    T* pdb = has_bias ? db.data<T>() : nullptr;
    for (int64_t r = 0; r < R; ++r) {
      const T* gr = pg + r * H;
      const T* xr = px + r * H;
      T* dr = pdx + r * H;
      const T m = mu.data<T>()[r], rs = rstd.data<T>()[r];
      T s1 = 0, s2 = 0;
      for (int64_t j = 0; j < H; ++j) {
        const T xh = (xr[j] - m) * rs, gw = gr[j] * pw[j];
        s1 += gw;
        s2 += gw * xh;
        pdw[j] += gr[j] * xh;
        if (pdb) pdb[j] += gr[j];
      }
      s1 /= T(H);
      s2 /= T(H);
      for (int64_t j = 0; j < H; ++j) {
        const T xh = (xr[j] - m) * rs;
        dr[j] = rs * (gr[j] * pw[j] - s1 - xh * s2);
      }
    }
  });
  return {dx, dw, db};
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_norm("layer_norm", x, weight, bias);
  Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor();
  auto [y, mu, rstd] = layer_norm_forward(xc, wc, bc, eps);
  std::vector<Tensor> inputs = {xc, wc};
  if (bc.defined()) inputs.push_back(bc);
  return record("layer_norm", inputs, y,
                [xs = saved(xc), ws = saved(wc), ms = saved(mu), rs = saved(rstd),
                 has_b = bc.defined()](const std::vector<Tensor>& g) {
                  auto r = layer_norm_backward(g[0], xs, ws, ms, rs, has_b);
                  if (!has_b) r.pop_back();
                  return r;
                });
}

}  // namespace titan
