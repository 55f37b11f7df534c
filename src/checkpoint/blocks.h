// src/checkpoint/blocks.h — a rank's block of a logical tensor, walked as
// contiguous runs of the full row-major layout; and the layout-independent
// checksum built on it.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/tensor/bfloat16.h"
#include "src/tensor/shape.h"

namespace titan {

// Calls f(full_element, local_element, count) for each contiguous run of the
// block `local` (row-major, contiguous) placed at `off` inside `full`.
template <class F>
void for_each_run(const Shape& full, const Shape& off, const Shape& local, F&& f) {
  const int nd = (int)full.size();
  if (nd == 0) {
    f(0, 0, 1);
    return;
  }
  int j = nd - 1;  // dims after j are whole in the block
  while (j > 0 && local[j] == full[j]) --j;
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * full[d + 1];
  int64_t run = 1;
  for (int d = j; d < nd; ++d) run *= local[d];
  int64_t outer = 1;
  for (int d = 0; d < j; ++d) outer *= local[d];
  if (run == 0 || outer == 0) return;
  std::vector<int64_t> idx(j, 0);
  for (int64_t k = 0; k < outer; ++k) {
    int64_t fo = off[j] * stride[j];
    for (int d = 0; d < j; ++d) fo += (off[d] + idx[d]) * stride[d];
    f(fo, k * run, run);
    for (int d = j - 1; d >= 0; --d) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

// The checksum of a float32 tensor: the sum over its elements, mod 2^64, of a
// mix of (flat index, value bits). A sum, so the blocks of any parallel layout
// add up to the same value; a flipped bit changes one term to an unrelated
// value. block_checksum is a block's share.
inline uint64_t checksum_term(uint64_t index, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  uint64_t z = index * 0x9E3779B97F4A7C15ull + bits + 0x632BE59BD9B4E019ull;  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t block_checksum(const Shape& full, const Shape& off, const Shape& local, const float* data) {
  uint64_t h = 0;
  for_each_run(full, off, local, [&](int64_t fo, int64_t lo, int64_t n) {
    for (int64_t i = 0; i < n; ++i) h += checksum_term((uint64_t)(fo + i), data[lo + i]);
  });
  return h;
}

}  // namespace titan
