// src/tensor/dtype.h — element types.
// Kernels exist for F32 and F64 (F64 is what gradchecks run in), I64/I32 for
// token ids and expert indices, Bool for masks. BF16 is a storage type
// (2 bytes) that meta tensors and the cost model already understand; CPU
// kernels reject it with a clear error until a bf16 path lands. U8 is a
// storage type too: FP8 codes (1 byte each) on a float8 wire (src/ops/float8.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/tensor/error.h"

namespace titan {

enum class DType { F32, F64, BF16, I32, I64, Bool, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::Bool: return 1;
    case DType::U8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::Bool: return "bool";
    case DType::U8: return "uint8";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }
inline bool is_integral(DType t) { return t == DType::I32 || t == DType::I64; }

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };

// dispatch_float(dt, "op", [&]<typename T>() { ... }) runs the body with
// T = float or double, and throws naming the op for any other dtype.
template <typename F>
void dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: f.template operator()<float>(); return;
    case DType::F64: f.template operator()<double>(); return;
    default: fail(op, ": expected a float32 or float64 tensor, got ", dtype_name(dt));
  }
}

// Every dtype with a CPU kernel (floats, ints, bool, bytes).
template <typename F>
void dispatch_all(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: f.template operator()<float>(); return;
    case DType::F64: f.template operator()<double>(); return;
    case DType::I32: f.template operator()<int32_t>(); return;
    case DType::I64: f.template operator()<int64_t>(); return;
    case DType::Bool: f.template operator()<bool>(); return;
    case DType::U8: f.template operator()<uint8_t>(); return;
    default: fail(op, ": no CPU kernel for dtype ", dtype_name(dt));
  }
}

}  // namespace titan
