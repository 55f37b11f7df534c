// src/tensor/iter.h — strided N-d loops shared by elementwise kernels.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "src/tensor/shape.h"

namespace titan {

// Elements above which a loop is split across OpenMP threads.
constexpr int64_t kParallelGrain = 1 << 15;

// Visits `shape` row by row (a row = the innermost dim after collapsing). For K operands with element strides
// `st[k]` (each sized like `shape`), calls
//   f(base[K], n, inner[K])
// where base[k] is the element offset of the row start and inner[k] the stride along the row. Every element is
// visited once; the order of visits is not part of the contract (kernels compute each element on its own).
// Before the loop, size-1 dims are dropped and neighbouring dims every operand steps through as one are merged
// (a [R, I, 1] slice of stride 2 is one row of R * I elements, not R * I rows of one), and a loop of few long
// rows is cut into row pieces, so work is split across threads when it is big whatever its shape.
template <int K, typename F>
void nd_rows(const Shape& shape, const std::array<const int64_t*, K>& st, F&& f) {
  // collapsed dims, outermost first
  std::vector<int64_t> size(shape.size());
  std::array<std::vector<int64_t>, K> stride;
  for (auto& v : stride) v.resize(shape.size());
  int64_t nd = 0;
  for (int64_t d = 0; d < (int64_t)shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < K && merge; ++k) merge = stride[k][nd - 1] == st[k][d] * shape[d];
    if (merge) {
      size[nd - 1] *= shape[d];
      for (int k = 0; k < K; ++k) stride[k][nd - 1] = st[k][d];
      continue;
    }
    size[nd] = shape[d];
    for (int k = 0; k < K; ++k) stride[k][nd] = st[k][d];
    ++nd;
  }
  std::array<int64_t, K> inner{};
  if (nd == 0) {  // one element
    std::array<int64_t, K> base{};
    f(base, 1, inner);
    return;
  }
  const int64_t n = size[nd - 1];
  for (int k = 0; k < K; ++k) inner[k] = stride[k][nd - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d < nd - 1; ++d) rows *= size[d];
  // pieces per row (only when there are fewer than 64 rows): about one per 1,024 elements, up to ~64 tasks
  const int64_t pieces = rows * n >= kParallelGrain && rows < 64 ? std::min<int64_t>(n / 1024 + 1, 64 / rows + 1) : 1;
  const int64_t piece = (n + pieces - 1) / pieces;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain && rows * pieces > 1)
  for (int64_t t = 0; t < rows * pieces; ++t) {
    const int64_t r = t / pieces, j0 = t % pieces * piece, len = std::min(piece, n - j0);
    if (len <= 0) continue;
    std::array<int64_t, K> base{};
    int64_t rem = r;
    for (int64_t d = nd - 2; d >= 0; --d) {
      const int64_t i = rem % size[d];
      rem /= size[d];
      for (int k = 0; k < K; ++k) base[k] += i * stride[k][d];
    }
    for (int k = 0; k < K; ++k) base[k] += j0 * inner[k];
    f(base, len, inner);
  }
}

}  // namespace titan
