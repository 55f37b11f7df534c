// Reductions: sum / mean over dims, max over a dim, sum_to (broadcast adjoint).
#include <algorithm>
#include <cmath>
#include <limits>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
// View of a contiguous tensor as [outer, n, inner] around dims [d0, d1].
struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
};
Split3 split3(const Shape& s, int64_t d0, int64_t d1) {
  Split3 r;
  for (int64_t i = 0; i < (int64_t)s.size(); ++i) {
    if (i < d0) r.outer *= s[i];
    else if (i <= d1) r.n *= s[i];
    else r.inner *= s[i];
  }
  return r;
}

// Sums dims d0..d1 (adjacent) of x, keeping them as size 1.
Tensor sum_range_forward(const Tensor& x, int64_t d0, int64_t d1) {
  Shape os = x.shape();
  for (int64_t i = d0; i <= d1; ++i) os[i] = 1;
  Tensor out = empty(os, x.dtype(), x.device());
  record_cost("sum", (double)x.numel(), bytes_of({&x, &out}));
  if (x.is_meta()) return out;
  Tensor xc = x.contiguous();
  Split3 p = split3(x.shape(), d0, d1);
  dispatch_float(x.dtype(), "sum", [&]<typename T>() {
    const T* px = xc.data<T>();
    T* po = out.data<T>();
    if (p.inner == 1) {
#pragma omp parallel for schedule(static) if (p.outer * p.n >= kParallelGrain && p.outer > 1)
      for (int64_t o = 0; o < p.outer; ++o) {
        const T* r = px + o * p.n;
        T acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < p.n; ++k) acc += r[k];
        po[o] = acc;
      }
      return;
    }
    // tasks: (outer index, a chunk of 256 columns); each sums its rows in order k = 0..n-1 (deterministic on
    // any thread count). One loop: a parallel region inside another would start a new team of threads per call.
    constexpr int64_t kCols = 256;
    const int64_t chunks = (p.inner + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (p.outer * p.n * p.inner >= kParallelGrain && p.outer * chunks > 1)
    for (int64_t t = 0; t < p.outer * chunks; ++t) {
      const int64_t o = t / chunks, i0 = t % chunks * kCols, i1 = std::min(p.inner, i0 + kCols);
      T* dst = po + o * p.inner;
      const T* src = px + o * p.n * p.inner;
      for (int64_t i = i0; i < i1; ++i) dst[i] = 0;
      for (int64_t k = 0; k < p.n; ++k) {
        const T* row = src + k * p.inner;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) dst[i] += row[i];
      }
    }
  });
  return out;
}

Tensor sum_range(const Tensor& x, int64_t d0, int64_t d1) {
  Tensor out = sum_range_forward(x, d0, d1);
  return record("sum", {x}, out, [xs = x.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{broadcast_to(g[0], xs)};
  });
}
}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  need_float("sum", x);
  const int64_t nd = x.dim();
  for (auto& d : dims) d = wrap_dim(d, nd, "sum");
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  Tensor y = x;
  if (dims.empty()) return y;
  // reduce runs of adjacent dims in one pass, last run first
  size_t i = dims.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && dims[j - 1] == dims[j] - 1) --j;
    y = sum_range(y, dims[j], dims[i - 1]);
    i = j;
  }
  if (keepdim) return y;
  Shape s;
  for (int64_t d = 0; d < nd; ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) s.push_back(x.shape()[d]);
  return reshape(y, s);
}

Tensor sum(const Tensor& x) {
  std::vector<int64_t> all(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) all[i] = i;
  if (all.empty()) return x;
  return sum(x, all, false);
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  int64_t count = 1;
  std::vector<int64_t> wd;
  for (auto d : dims) wd.push_back(wrap_dim(d, x.dim(), "mean"));
  std::sort(wd.begin(), wd.end());
  wd.erase(std::unique(wd.begin(), wd.end()), wd.end());
  for (auto d : wd) count *= x.shape()[d];
  return mul(sum(x, wd, keepdim), 1.0 / (double)count);
}

Tensor mean(const Tensor& x) { return mul(sum(x), 1.0 / (double)x.numel()); }

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - (int64_t)shape.size();
  TITAN_CHECK(lead >= 0, "sum_to: cannot sum ", shape_str(x.shape()), " to larger rank ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && x.shape()[i] != 1) dims.push_back(i);
    else
      TITAN_CHECK(shape[i - lead] == x.shape()[i], "sum_to: shape ", shape_str(x.shape()), " is not a broadcast of ",
                  shape_str(shape));
  }
  Tensor y = dims.empty() ? x : sum(x, dims, true);
  return reshape(y, shape);
}

// ---- max -------------------------------------------------------------------
namespace {
Tensor max_backward(const Tensor& g, const Tensor& idx, const Shape& xs, int64_t dim) {
  Tensor out = zeros(xs, g.dtype(), g.device());
  record_cost("max_backward", 0, bytes_of({&g, &idx, &out}));
  if (g.is_meta()) return out;
  Split3 p = split3(xs, dim, dim);
  Tensor gc = g.contiguous();
  const int64_t* pi = idx.data<int64_t>();
  dispatch_float(g.dtype(), "max_backward", [&]<typename T>() {
    const T* pg = gc.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t i = 0; i < p.inner; ++i) {
        int64_t k = pi[o * p.inner + i];
        po[(o * p.n + k) * p.inner + i] += pg[o * p.inner + i];
      }
  });
  return out;
}
}  // namespace

std::pair<Tensor, Tensor> max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  need_float("max", x);
  dim = wrap_dim(dim, x.dim(), "max");
  TITAN_CHECK(x.shape()[dim] > 0, "max: cannot reduce over empty dim ", dim, " of ", shape_str(x.shape()));
  Shape ks = x.shape();
  ks[dim] = 1;
  Tensor vals = empty(ks, x.dtype(), x.device());
  Tensor idx = empty(ks, DType::I64, x.device());
  record_cost("max", (double)x.numel(), bytes_of({&x, &vals, &idx}));
  if (!x.is_meta()) {
    Tensor xc = x.contiguous();
    Split3 p = split3(x.shape(), dim, dim);
    dispatch_float(x.dtype(), "max", [&]<typename T>() {
      const T* px = xc.data<T>();
      T* pv = vals.data<T>();
      int64_t* pi = idx.data<int64_t>();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
      for (int64_t o = 0; o < p.outer; ++o)
        for (int64_t i = 0; i < p.inner; ++i) {
          const T* base = px + o * p.n * p.inner + i;
          T best = base[0];
          int64_t bi = 0;
          for (int64_t k = 1; k < p.n; ++k)
            if (base[k * p.inner] > best || (std::isnan(base[k * p.inner]) && !std::isnan(best))) {
              best = base[k * p.inner];
              bi = k;
            }
          pv[o * p.inner + i] = best;
          pi[o * p.inner + i] = bi;
        }
    });
  }
  vals = record("max", {x}, vals, [ix = idx, xs = x.shape(), dim](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{max_backward(g[0], ix, xs, dim)};
  });
  if (!keepdim) {
    Shape s = x.shape();
    s.erase(s.begin() + dim);
    vals = reshape(vals, s);
    idx = reshape(idx, s);
  }
  return {vals, idx};
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return max_with_indices(x, dim, keepdim).first; }

}  // namespace titan
