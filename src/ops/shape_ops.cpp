// Shape ops: views (reshape, transpose, permute, slice) and copies (contiguous,
// clone, cast, broadcast_to, concat). Views share storage; their backward
// maps the gradient back through the inverse view.
#include <numeric>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
Tensor make_view(const Tensor& x, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = x.dtype();
  impl->device = x.device();
  impl->storage = x.impl()->storage;
  return Tensor(impl);
}

Tensor copy_to_contiguous(const Tensor& x, const char* name) {
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  record_cost(name, 0, 2.0 * (double)x.nbytes());
  copy_(out, x);
  return out;
}

Shape infer_shape(const Shape& s, int64_t n, const Shape& from) {
  Shape r = s;
  int64_t known = 1, infer = -1;
  for (int64_t i = 0; i < (int64_t)r.size(); ++i) {
    if (r[i] == -1) {
      TITAN_CHECK(infer < 0, "reshape: more than one -1 in target shape ", shape_str(s));
      infer = i;
    } else {
      TITAN_CHECK(r[i] >= 0, "reshape: invalid target shape ", shape_str(s));
      known *= r[i];
    }
  }
  if (infer >= 0) {
    TITAN_CHECK(known > 0 && n % known == 0, "reshape: cannot reshape ", shape_str(from), " (", n,
                " elements) to ", shape_str(s));
    r[infer] = n / known;
  }
  TITAN_CHECK(numel(r) == n, "reshape: cannot reshape ", shape_str(from), " (", n, " elements) to ", shape_str(s),
              " (", numel(r), " elements)");
  return r;
}
}  // namespace

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = copy_to_contiguous(x, "contiguous");
  return record("contiguous", {x}, out, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
}

Tensor reshape(const Tensor& x, const Shape& s) {
  Shape target = infer_shape(s, x.numel(), x.shape());
  Tensor xc = x.contiguous();  // a no-op for contiguous x; otherwise a recorded copy
  Tensor out = make_view(xc, target, contiguous_strides(target), xc.offset());
  return record("reshape", {xc}, out, [xs = x.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{reshape(g[0], xs)};
  });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, x.dim(), "transpose");
  d1 = wrap_dim(d1, x.dim(), "transpose");
  Shape s = x.shape(), st = x.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = make_view(x, s, st, x.offset());
  return record("transpose", {x}, out, [d0, d1](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{transpose(g[0], d0, d1)};
  });
}

Tensor permute(const Tensor& x, const Shape& dims) {
  const int64_t nd = x.dim();
  TITAN_CHECK((int64_t)dims.size() == nd, "permute: got ", dims.size(), " dims ", shape_str(dims), " for a tensor ",
              shape_str(x.shape()));
  Shape s(nd), st(nd), inv(nd, -1);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(dims[i], nd, "permute");
    TITAN_CHECK(inv[d] < 0, "permute: dim ", d, " repeated in ", shape_str(dims));
    inv[d] = i;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  Tensor out = make_view(x, s, st, x.offset());
  return record("permute", {x}, out, [inv](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{permute(g[0], inv)};
  });
}

namespace {
Tensor slice_backward(const Tensor& g, const Shape& xs, int64_t dim, int64_t start) {
  Tensor out = zeros(xs, g.dtype(), g.device());
  record_cost("slice_backward", 0, 2.0 * (double)g.nbytes());
  Shape st = out.strides();
  Tensor region = make_view(out, g.shape(), st, start * st[dim]);
  copy_(region, g);
  return out;
}
}  // namespace

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  dim = wrap_dim(dim, x.dim(), "slice");
  const int64_t n = x.shape()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  TITAN_CHECK(start >= 0 && start <= end && end <= n, "slice: range [", start, ", ", end, ") invalid for dim ", dim,
              " of size ", n, " in ", shape_str(x.shape()));
  Shape s = x.shape();
  s[dim] = end - start;
  Tensor out = make_view(x, s, x.strides(), x.offset() + start * x.strides()[dim]);
  return record("slice", {x}, out, [xs = x.shape(), dim, start](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{slice_backward(g[0], xs, dim, start)};
  });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  TITAN_CHECK(total == x.shape()[dim], "split: sizes sum to ", total, " but dim ", dim, " of ", shape_str(x.shape()),
              " has size ", x.shape()[dim]);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (auto sz : sizes) {
    out.push_back(slice(x, dim, at, at + sz));
    at += sz;
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  TITAN_CHECK(!xs.empty(), "concat: empty input list");
  const Tensor& x0 = xs[0];
  dim = wrap_dim(dim, x0.dim(), "concat");
  Shape s = x0.shape();
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    same_dtype("concat", x0, t);
    same_device("concat", {&x0, &t});
    bool ok = t.dim() == x0.dim();
    for (int64_t d = 0; ok && d < x0.dim(); ++d) ok = d == dim || t.shape()[d] == s[d];
    TITAN_CHECK(ok, "concat: input ", i, " has shape ", shape_str(t.shape()), ", incompatible with ", shape_str(s),
                " along dim ", dim);
    total += t.shape()[dim];
  }
  s[dim] = total;
  Tensor out = empty(s, x0.dtype(), x0.device());
  record_cost("concat", 0, 2.0 * (double)out.nbytes());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const auto& t : xs) {
    Shape rs = s;
    rs[dim] = t.shape()[dim];
    copy_(make_view(out, rs, out.strides(), at * out.strides()[dim]), t);
    at += t.shape()[dim];
    sizes.push_back(t.shape()[dim]);
  }
  return record("concat", xs, out, [sizes, dim](const std::vector<Tensor>& g) {
    std::vector<Tensor> r;
    int64_t a = 0;
    for (auto sz : sizes) {
      r.push_back(slice(g[0], dim, a, a + sz));
      a += sz;
    }
    return r;
  });
}

Tensor broadcast_to(const Tensor& x, const Shape& s) {
  Shape b = broadcast_shapes(x.shape(), s, "broadcast_to");
  TITAN_CHECK(b == s, "broadcast_to: cannot broadcast ", shape_str(x.shape()), " to ", shape_str(s));
  if (x.shape() == s) return x;
  Tensor out = empty(s, x.dtype(), x.device());
  record_cost("broadcast_to", 0, bytes_of({&x, &out}));
  if (!x.is_meta()) copy_(out, make_view(x, s, broadcast_strides(x.shape(), x.strides(), s), x.offset()));
  return record("broadcast_to", {x}, out, [xs = x.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], xs)};
  });
}

Tensor cast(const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  Tensor out = empty(x.shape(), t, x.device());
  record_cost("cast", 0, bytes_of({&x, &out}));
  copy_(out, x);
  if (!is_floating(t) || !is_floating(x.dtype())) return out;
  return record("cast", {x}, out, [from = x.dtype()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{cast(g[0], from)};
  });
}

// ---- Tensor member forms ---------------------------------------------------
Tensor Tensor::contiguous() const { return titan::contiguous(*this); }
Tensor Tensor::reshape(const Shape& s) const { return titan::reshape(*this, s); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return titan::transpose(*this, d0, d1); }
Tensor Tensor::permute(const Shape& dims) const { return titan::permute(*this, dims); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end) const { return titan::slice(*this, dim, start, end); }
Tensor Tensor::to(DType t) const { return cast(*this, t); }
Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return titan::reshape(*this, s);
}
Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  TITAN_CHECK(shape()[d] == 1, "squeeze: dim ", d, " of ", shape_str(shape()), " is not 1");
  Shape s = shape();
  s.erase(s.begin() + d);
  return titan::reshape(*this, s);
}
Tensor Tensor::clone() const {
  Tensor out = copy_to_contiguous(*this, "clone");
  return record("clone", {*this}, out, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
}

}  // namespace titan
