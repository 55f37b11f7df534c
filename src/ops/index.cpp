// Indexing: embedding, gather/scatter/scatter_add, index_select/index_add,
// topk, argsort. All loops run in a fixed order (deterministic sums).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
};
Split3 split_at(const Shape& s, int64_t dim) {
  Split3 r;
  for (int64_t i = 0; i < (int64_t)s.size(); ++i) {
    if (i < dim) r.outer *= s[i];
    else if (i == dim) r.n = s[i];
    else r.inner *= s[i];
  }
  return r;
}

void check_range(const char* op, const std::vector<int64_t>& idx, int64_t n, int64_t dim) {
  for (size_t i = 0; i < idx.size(); ++i)
    TITAN_CHECK(idx[i] >= 0 && idx[i] < n, op, ": index ", idx[i], " at position ", i, " is out of range [0, ", n,
                ") for dim ", dim);
}

// gather-like shape rule: index has x's rank and x's sizes except along dim
void check_gather_shape(const char* op, const Tensor& x, int64_t dim, const Tensor& idx) {
  bool ok = idx.dim() == x.dim();
  for (int64_t d = 0; ok && d < x.dim(); ++d) ok = d == dim || idx.size(d) == x.size(d);
  TITAN_CHECK(ok, op, ": index ", shape_str(idx.shape()), " must match input ", shape_str(x.shape()),
              " in every dim except ", dim);
}

// out = x (copied); out[o, idx[o,i,c], c] (+)= src[o, i, c]
template <bool kAdd>
Tensor scatter_forward(const char* op, const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src) {
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  record_cost(op, kAdd ? (double)src.numel() : 0.0, bytes_of({&x, &idx, &src, &out}));
  if (x.is_meta()) return out;
  copy_(out, x);
  auto iv = index_values(idx);
  const Split3 px = split_at(x.shape(), dim), pi = split_at(idx.shape(), dim);
  check_range(op, iv, px.n, dim);
  Tensor sc = src.contiguous();
  dispatch_float(x.dtype(), op, [&]<typename T>() {
    const T* ps = sc.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < pi.outer; ++o)
      for (int64_t i = 0; i < pi.n; ++i)
        for (int64_t c = 0; c < pi.inner; ++c) {
          const int64_t at = (o * pi.n + i) * pi.inner + c;
          T& dst = po[(o * px.n + iv[at]) * px.inner + c];
          if constexpr (kAdd) dst += ps[at];
          else dst = ps[at];
        }
  });
  return out;
}

Tensor gather_forward(const Tensor& x, int64_t dim, const Tensor& idx) {
  Tensor out = empty(idx.shape(), x.dtype(), x.device());
  record_cost("gather", 0, bytes_of({&idx, &out}) * 2);
  if (x.is_meta()) return out;
  auto iv = index_values(idx);
  const Split3 px = split_at(x.shape(), dim), pi = split_at(idx.shape(), dim);
  check_range("gather", iv, px.n, dim);
  Tensor xc = x.contiguous();
  dispatch_float(x.dtype(), "gather", [&]<typename T>() {
    const T* p = xc.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < pi.outer; ++o)
      for (int64_t i = 0; i < pi.n; ++i)
        for (int64_t c = 0; c < pi.inner; ++c) {
          const int64_t at = (o * pi.n + i) * pi.inner + c;
          po[at] = p[(o * px.n + iv[at]) * px.inner + c];
        }
  });
  return out;
}

// Gradient of scatter's src: g at the written position, but only for the
// element that wrote last (later duplicates overwrite earlier ones).
Tensor scatter_src_backward(const Tensor& g, int64_t dim, const Tensor& idx) {
  Tensor out = zeros(idx.shape(), g.dtype(), g.device());
  record_cost("scatter_backward", 0, bytes_of({&idx, &out}) * 2);
  if (g.is_meta()) return out;
  auto iv = index_values(idx);
  const Split3 pg = split_at(g.shape(), dim), pi = split_at(idx.shape(), dim);
  std::vector<int64_t> writer(g.numel(), -1);
  for (int64_t o = 0; o < pi.outer; ++o)
    for (int64_t i = 0; i < pi.n; ++i)
      for (int64_t c = 0; c < pi.inner; ++c) {
        const int64_t at = (o * pi.n + i) * pi.inner + c;
        writer[(o * pg.n + iv[at]) * pg.inner + c] = at;
      }
  Tensor gc = g.contiguous();
  dispatch_float(g.dtype(), "scatter_backward", [&]<typename T>() {
    const T* pgd = gc.data<T>();
    T* po = out.data<T>();
    for (int64_t p = 0; p < (int64_t)writer.size(); ++p)
      if (writer[p] >= 0) po[writer[p]] = pgd[p];
  });
  return out;
}

// out[o, i, c] = x[o, idx[i], c]
Tensor index_select_forward(const char* op, const Tensor& x, int64_t dim, const std::vector<int64_t>& iv,
                            int64_t count) {
  Shape s = x.shape();
  s[dim] = count;
  Tensor out = empty(s, x.dtype(), x.device());
  record_cost(op, 0, 2.0 * (double)out.nbytes());
  if (x.is_meta()) return out;
  const Split3 px = split_at(x.shape(), dim);
  check_range(op, iv, px.n, dim);
  Tensor xc = x.contiguous();
  dispatch_float(x.dtype(), op, [&]<typename T>() {
    const T* p = xc.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for collapse(2) schedule(static) if (out.numel() >= kParallelGrain)
    for (int64_t o = 0; o < px.outer; ++o)
      for (int64_t i = 0; i < count; ++i)
        std::copy(p + (o * px.n + iv[i]) * px.inner, p + (o * px.n + iv[i] + 1) * px.inner,
                  po + (o * count + i) * px.inner);
  });
  return out;
}

// out = x (copied); out[o, idx[i], c] += src[o, i, c], i in order
Tensor index_add_forward(const char* op, const Tensor& x, int64_t dim, const std::vector<int64_t>& iv,
                         const Tensor& src, EagerSplit eager = {}) {
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  record_cost(op, (double)src.numel(), bytes_of({&x, &src, &out}), eager);
  if (x.is_meta()) return out;
  copy_(out, x);
  const Split3 px = split_at(x.shape(), dim);
  check_range(op, iv, px.n, dim);
  Tensor sc = src.contiguous();
  const int64_t count = (int64_t)iv.size();
  dispatch_float(x.dtype(), op, [&]<typename T>() {
    const T* ps = sc.data<T>();
    T* po = out.data<T>();
    // parallel over the contiguous inner extent only: each element's sum keeps its order
#pragma omp parallel for schedule(static) if (src.numel() >= kParallelGrain && px.inner >= 64)
    for (int64_t c0 = 0; c0 < px.inner; c0 += 64) {
      const int64_t c1 = std::min(px.inner, c0 + 64);
      for (int64_t o = 0; o < px.outer; ++o)
        for (int64_t i = 0; i < count; ++i) {
          T* d = po + (o * px.n + iv[i]) * px.inner;
          const T* s = ps + (o * count + i) * px.inner;
          for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
        }
    }
  });
  return out;
}

std::vector<int64_t> index_1d(const char* op, const Tensor& idx) {
  need_index(op, idx);
  TITAN_CHECK(idx.dim() == 1, op, ": index must be 1-D, got ", shape_str(idx.shape()));
  return idx.is_meta() ? std::vector<int64_t>() : index_values(idx);
}
}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  same_device("gather", {&x, &index});
  need_index("gather", index);
  dim = wrap_dim(dim, x.dim(), "gather");
  check_gather_shape("gather", x, dim, index);
  Tensor out = gather_forward(x, dim, index);
  return record("gather", {x}, out, [xs = x.shape(), dim, idx = index](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{scatter_forward<true>("scatter_add", zeros(xs, g[0].dtype(), g[0].device()), dim, idx, g[0])};
  });
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  same_device("scatter_add", {&x, &index, &src});
  need_index("scatter_add", index);
  same_dtype("scatter_add", x, src);
  dim = wrap_dim(dim, x.dim(), "scatter_add");
  check_gather_shape("scatter_add", x, dim, index);
  TITAN_CHECK(src.shape() == index.shape(), "scatter_add: src ", shape_str(src.shape()), " must match index ",
              shape_str(index.shape()));
  Tensor out = scatter_forward<true>("scatter_add", x, dim, index, src);
  return record("scatter_add", {x, src}, out, [dim, idx = index](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0], gather_forward(g[0], dim, idx)};
  });
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  same_device("scatter", {&x, &index, &src});
  need_index("scatter", index);
  same_dtype("scatter", x, src);
  dim = wrap_dim(dim, x.dim(), "scatter");
  check_gather_shape("scatter", x, dim, index);
  TITAN_CHECK(src.shape() == index.shape(), "scatter: src ", shape_str(src.shape()), " must match index ",
              shape_str(index.shape()));
  Tensor out = scatter_forward<false>("scatter", x, dim, index, src);
  return record("scatter", {x, src}, out, [dim, idx = index, ss = src.shape()](const std::vector<Tensor>& g) {
    // overwritten positions get no gradient into x
    Tensor dx = scatter_forward<false>("scatter", g[0], dim, idx, zeros(ss, g[0].dtype(), g[0].device()));
    return std::vector<Tensor>{dx, scatter_src_backward(g[0], dim, idx)};
  });
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  same_device("index_select", {&x, &index});
  dim = wrap_dim(dim, x.dim(), "index_select");
  auto iv = index_1d("index_select", index);
  Tensor out = index_select_forward("index_select", x, dim, iv, index.size(0));
  return record("index_select", {x}, out, [xs = x.shape(), dim, iv](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{
        index_add_forward("index_add", zeros(xs, g[0].dtype(), g[0].device()), dim, iv, g[0])};
  });
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  same_device("index_add", {&x, &index, &src});
  same_dtype("index_add", x, src);
  dim = wrap_dim(dim, x.dim(), "index_add");
  auto iv = index_1d("index_add", index);
  Shape want = x.shape();
  want[dim] = index.size(0);
  TITAN_CHECK(src.shape() == want, "index_add: src ", shape_str(src.shape()), " must be ", shape_str(want),
              " (input ", shape_str(x.shape()), " with dim ", dim, " = len(index))");
  Tensor out = index_add_forward("index_add", x, dim, iv, src);
  return record("index_add", {x, src}, out, [dim, iv, n = index.size(0)](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0], index_select_forward("index_select", g[0], dim, iv, n)};
  });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  same_device("embedding", {&weight, &ids});
  need_index("embedding", ids);
  need_float("embedding", weight);
  TITAN_CHECK(weight.dim() == 2, "embedding: weight must be [vocab, hidden], got ", shape_str(weight.shape()));
  std::vector<int64_t> iv = ids.is_meta() ? std::vector<int64_t>() : index_values(ids);
  for (size_t i = 0; i < iv.size(); ++i)
    TITAN_CHECK(iv[i] >= 0 && iv[i] < weight.size(0), "embedding: token id ", iv[i], " at position ", i,
                " is outside the vocabulary [0, ", weight.size(0), ") of weight ", shape_str(weight.shape()));
  Tensor rows = index_select_forward("embedding", weight, 0, iv, ids.numel());
  Shape os = ids.shape();
  os.push_back(weight.size(1));
  Tensor out;
  {
    NoGradGuard ng;
    out = reshape(rows, os);
  }
  return record("embedding", {weight}, out, [ws = weight.shape(), iv](const std::vector<Tensor>& g) {
    Tensor g2 = reshape(g[0], {-1, ws[1]});
    return std::vector<Tensor>{
        index_add_forward("embedding_backward", zeros(ws, g[0].dtype(), g[0].device()), 0, iv, g2,
                          EagerSplit{2, 1.0})};  // eager: zeros + index_add
  });
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k) {
  need_float("topk", x);
  TITAN_CHECK(x.dim() >= 1, "topk: expected rank >= 1");
  const int64_t C = x.size(-1);
  TITAN_CHECK(k >= 1 && k <= C, "topk: k = ", k, " must be in [1, ", C, "] for input ", shape_str(x.shape()));
  Shape s = x.shape();
  s.back() = k;
  Tensor vals = empty(s, x.dtype(), x.device());
  Tensor idx = empty(s, DType::I64, x.device());
  record_cost("topk", (double)x.numel() * std::log2((double)k + 1), bytes_of({&x, &vals, &idx}));
  if (!x.is_meta()) {
    Tensor xc = x.contiguous();
    const int64_t R = x.numel() / C;
    dispatch_float(x.dtype(), "topk", [&]<typename T>() {
      const T* p = xc.data<T>();
      T* pv = vals.data<T>();
      int64_t* pi = idx.data<int64_t>();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
      for (int64_t r = 0; r < R; ++r) {
        const T* row = p + r * C;
        std::vector<int64_t> order(C);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
          return row[a] > row[b] || (row[a] == row[b] && a < b);
        });
        for (int64_t j = 0; j < k; ++j) {
          pi[r * k + j] = order[j];
          pv[r * k + j] = row[order[j]];
        }
      }
    });
  }
  vals = record("topk", {x}, vals, [xs = x.shape(), ix = idx](const std::vector<Tensor>& g) {
    Tensor z = zeros(xs, g[0].dtype(), g[0].device());
    return std::vector<Tensor>{scatter_forward<true>("scatter_add", z, (int64_t)xs.size() - 1, ix, g[0])};
  });
  return {vals, idx};
}

Tensor argsort(const Tensor& x, bool descending) {
  TITAN_CHECK(x.dim() >= 1, "argsort: expected rank >= 1");
  Tensor idx = empty(x.shape(), DType::I64, x.device());
  const int64_t C = x.size(-1);
  record_cost("argsort", (double)x.numel() * std::log2((double)C + 1), bytes_of({&x, &idx}));
  if (x.is_meta() || C == 0) return idx;
  Tensor xc = x.contiguous();
  const int64_t R = x.numel() / C;
  dispatch_all(x.dtype(), "argsort", [&]<typename T>() {
    const T* p = xc.data<T>();
    int64_t* pi = idx.data<int64_t>();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
    for (int64_t r = 0; r < R; ++r) {
      const T* row = p + r * C;
      int64_t* out = pi + r * C;
      std::iota(out, out + C, 0);
      if (descending)
        std::stable_sort(out, out + C, [&](int64_t a, int64_t b) { return row[a] > row[b]; });
      else
        std::stable_sort(out, out + C, [&](int64_t a, int64_t b) { return row[a] < row[b]; });
    }
  });
  return idx;
}

}  // namespace titan
