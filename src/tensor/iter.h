// src/tensor/iter.h — strided N-d loops shared by elementwise kernels.
#pragma once
#include <array>
#include <cstdint>

#include "src/tensor/shape.h"

namespace titan {

// Elements above which a loop is split across OpenMP threads.
constexpr int64_t kParallelGrain = 1 << 15;

// Visits `shape` row by row (a row = the innermost dim). For K operands with
// element strides `st[k]` (each sized like `shape`), calls
//   f(base[K], n, inner[K])
// where base[k] is the element offset of the row start and inner[k] the
// stride along the row. Rows are split across threads when the loop is big.
template <int K, typename F>
void nd_rows(const Shape& shape, const std::array<const int64_t*, K>& st, F&& f) {
  const int64_t nd = (int64_t)shape.size();
  if (nd == 0) {
    std::array<int64_t, K> base{}, inner{};
    f(base, 1, inner);
    return;
  }
  const int64_t n = shape[nd - 1];
  std::array<int64_t, K> inner;
  for (int k = 0; k < K; ++k) inner[k] = st[k][nd - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d < nd - 1; ++d) rows *= shape[d];
  if (n == 0 || rows == 0) return;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    std::array<int64_t, K> base{};
    int64_t rem = r;
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t i = rem % shape[d];
      rem /= shape[d];
      for (int k = 0; k < K; ++k) base[k] += i * st[k][d];
    }
    f(base, n, inner);
  }
}

}  // namespace titan
