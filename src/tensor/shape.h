// src/tensor/shape.h — shapes, strides, broadcasting.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);
Shape contiguous_strides(const Shape& s);
// Normalizes a possibly negative axis; throws naming `op` when out of range.
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` with both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides that read a tensor of shape `s` (strides `st`) as if broadcast to `out`.
Shape broadcast_strides(const Shape& s, const Shape& st, const Shape& out);

}  // namespace titan
