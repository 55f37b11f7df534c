#include "src/tensor/shape.h"

#include <sstream>

#include "src/tensor/error.h"

namespace titan {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = (int64_t)s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  int64_t w = d < 0 ? d + ndim : d;
  TITAN_CHECK(w >= 0 && w < ndim, op, ": dimension ", d, " out of range for a tensor with ", ndim,
              " dims (valid: ", -ndim, "..", ndim - 1, ")");
  return w;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TITAN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Shape& s, const Shape& st, const Shape& out) {
  Shape r(out.size(), 0);
  size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) r[off + i] = (s[i] == 1 && out[off + i] != 1) ? 0 : st[i];
  return r;
}

}  // namespace titan
