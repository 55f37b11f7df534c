// softmax, log_softmax (numerically stable, over the last dim) and the fused
// cross-entropy over integer targets.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
// rows of a contiguous [R, C] view
template <typename T, bool kLog>
void softmax_rows(const T* x, T* y, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static) if (R * C >= kParallelGrain)
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < C; ++j) m = std::max(m, xr[j]);
    if (m == -std::numeric_limits<T>::infinity()) m = 0;  // fully masked row
    T s = 0;
    if constexpr (std::is_same_v<T, float>) {  // vectorized exp into y, then an ordered sum (deterministic)
      Eigen::Map<Eigen::ArrayXf>(yr, C) = (Eigen::Map<const Eigen::ArrayXf>(xr, C) - m).exp();
      for (int64_t j = 0; j < C; ++j) s += yr[j];
    } else {
      for (int64_t j = 0; j < C; ++j) {
        T e = std::exp(xr[j] - m);
        if constexpr (!kLog) yr[j] = e;
        s += e;
      }
    }
    if constexpr (kLog) {
      T lse = m + std::log(s);
      for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] - lse;
    } else {
      T inv = T(1) / s;
      for (int64_t j = 0; j < C; ++j) yr[j] *= inv;
    }
  }
}

template <bool kLog>
Tensor softmax_forward(const Tensor& x) {
  const char* name = kLog ? "log_softmax" : "softmax";
  need_float(name, x);
  TITAN_CHECK(x.dim() >= 1, name, ": expected rank >= 1, got a scalar");
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  record_cost(name, 4.0 * (double)x.numel(), bytes_of({&x, &y}), kLog ? EagerSplit{} : EagerSplit{2, 2.0});
  if (x.is_meta()) return y;
  Tensor xc = x.contiguous();
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  dispatch_float(x.dtype(), name, [&]<typename T>() { softmax_rows<T, kLog>(xc.data<T>(), y.data<T>(), R, C); });
  return y;
}

// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)
template <bool kLog>
Tensor softmax_backward(const Tensor& g, const Tensor& y) {
  const char* name = kLog ? "log_softmax_backward" : "softmax_backward";
  Tensor dx = empty(y.shape(), y.dtype(), y.device());
  record_cost(name, 4.0 * (double)y.numel(), bytes_of({&g, &y, &dx}), kLog ? EagerSplit{} : EagerSplit{2, 2.0});
  if (y.is_meta()) return dx;
  Tensor gc = g.contiguous();
  const int64_t C = y.size(-1), R = C ? y.numel() / C : 0;
  dispatch_float(y.dtype(), name, [&]<typename T>() {
    const T* pg = gc.data<T>();
    const T* py = y.data<T>();
    T* pd = dx.data<T>();
#pragma omp parallel for schedule(static) if (R * C >= kParallelGrain)
    for (int64_t r = 0; r < R; ++r) {
      const T* gr = pg + r * C;
      const T* yr = py + r * C;
      T* dr = pd + r * C;
      T s = 0;
      if constexpr (kLog) {
        for (int64_t j = 0; j < C; ++j) s += gr[j];
        for (int64_t j = 0; j < C; ++j) dr[j] = gr[j] - std::exp(yr[j]) * s;
      } else {
        for (int64_t j = 0; j < C; ++j) s += gr[j] * yr[j];
        for (int64_t j = 0; j < C; ++j) dr[j] = yr[j] * (gr[j] - s);
      }
    }
  });
  return dx;
}

template <bool kLog>
Tensor softmax_impl(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), kLog ? "log_softmax" : "softmax");
  if (dim != x.dim() - 1)  // move the dim last, apply, move back
    return transpose(softmax_impl<kLog>(transpose(x, dim, -1), -1), dim, -1);
  Tensor y = softmax_forward<kLog>(x);
  return record(kLog ? "log_softmax" : "softmax", {x}, y, [ys = saved(y)](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{softmax_backward<kLog>(g[0], ys)};
  });
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl<false>(x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl<true>(x, dim); }

// ---- cross-entropy ---------------------------------------------------------
namespace {
// -> (loss [], lse [N], number of counted targets)
std::tuple<Tensor, Tensor, int64_t> cross_entropy_forward(const Tensor& logits, const std::vector<int64_t>& t,
                                                          int64_t ignore_index) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor loss = empty({}, logits.dtype(), logits.device());
  Tensor lse = empty({N}, logits.dtype(), logits.device());
  record_cost("cross_entropy", 4.0 * (double)N * V, bytes_of({&logits, &lse}),
              EagerSplit{3, 3.0});  // eager: float(), log_softmax, nll_loss
  int64_t valid = 0;
  if (logits.is_meta()) return {loss, lse, N};
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == ignore_index) continue;
    TITAN_CHECK(t[i] >= 0 && t[i] < V, "cross_entropy: target ", t[i], " at position ", i,
                " is outside the vocabulary [0, ", V, ") (and is not ignore_index ", ignore_index, ")");
    ++valid;
  }
  Tensor lc = logits.contiguous();
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const T* x = lc.data<T>();
    T* pl = lse.data<T>();
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (N * V >= kParallelGrain)
    for (int64_t i = 0; i < N; ++i) {
      const T* r = x + i * V;
      T m = r[0];
      for (int64_t j = 1; j < V; ++j) m = std::max(m, r[j]);
      T s = 0;
      if constexpr (std::is_same_v<T, float>) {  // vectorized exp (large vocabularies), summed in order
        // Eigen-aligned scratch: Eigen peels unaligned heads with scalar exp, so the
        // alignment must not vary from run to run (determinism)
        thread_local Eigen::ArrayXf tmp;
        if (tmp.size() < V) tmp.resize(V);
        tmp.head(V) = (Eigen::Map<const Eigen::ArrayXf>(r, V) - m).exp();
        for (int64_t j = 0; j < V; ++j) s += tmp[j];
      } else {
        for (int64_t j = 0; j < V; ++j) s += std::exp(r[j] - m);
      }
      pl[i] = m + std::log(s);
      if (t[i] != ignore_index) total += (double)(pl[i] - r[t[i]]);
    }
    *loss.data<T>() = valid ? static_cast<T>(total / (double)valid) : std::numeric_limits<T>::quiet_NaN();
  });
  return {loss, lse, valid};
}

// dlogits = (softmax(logits) - onehot(t)) * g / valid, zero rows for ignored targets
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& lse, const std::vector<int64_t>& t,
                              int64_t ignore_index, int64_t valid) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor dx = empty({N, V}, logits.dtype(), logits.device());
  record_cost("cross_entropy_backward", 3.0 * (double)N * V, bytes_of({&logits, &dx}), EagerSplit{3, 3.0});
  if (logits.is_meta()) return dx;
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    const T* x = logits.data<T>();
    const T* pl = lse.data<T>();
    T* pd = dx.data<T>();
    const T scale = valid ? g.item<T>() / static_cast<T>(valid) : T(0);
#pragma omp parallel for schedule(static) if (N * V >= kParallelGrain)
    for (int64_t i = 0; i < N; ++i) {
      T* d = pd + i * V;
      if (t[i] == ignore_index) {
        std::fill(d, d + V, T(0));
        continue;
      }
      const T* r = x + i * V;
      if constexpr (std::is_same_v<T, float>) {
        Eigen::Map<Eigen::ArrayXf>(d, V) = (Eigen::Map<const Eigen::ArrayXf>(r, V) - pl[i]).exp() * scale;
      } else {
        for (int64_t j = 0; j < V; ++j) d[j] = std::exp(r[j] - pl[i]) * scale;
      }
      d[t[i]] -= scale;
    }
  });
  return dx;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  same_device("cross_entropy", {&logits, &targets});
  need_float("cross_entropy", logits);
  need_index("cross_entropy", targets);
  TITAN_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cross_entropy: expected logits [N, V] and targets [N], got ", shape_str(logits.shape()), " and ",
              shape_str(targets.shape()));
  std::vector<int64_t> t = logits.is_meta() ? std::vector<int64_t>() : index_values(targets);
  auto [loss, lse, valid] = cross_entropy_forward(logits, t, ignore_index);
  return record("cross_entropy", {logits}, loss,
                [xs = saved(logits.contiguous()), ls = saved(lse), t = std::move(t), ignore_index,
                 valid = valid](const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{cross_entropy_backward(g[0], xs, ls, t, ignore_index, valid)};
                });
}

}  // namespace titan
