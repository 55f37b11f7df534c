// src/ops/autocast.h — bf16 autocast: the mode in which GEMMs multiply bfloat16 operands.
//
// RAII, as PyTorch's torch.autocast(dtype=torch.bfloat16): while an AutocastScope(DType::BF16) is alive on this
// thread, the GEMM ops (matmul, linear, grouped_linear) read their float32 operands as bfloat16 (rounded to
// nearest even), accumulate in float32, and round their outputs to bfloat16; their backward does the same with
// the incoming gradient (a bf16 output's gradient is bf16), and a weight's gradient is the bf16 GEMM's result
// (autocast's cast back to the float32 parameter's grad is exact). Everything else (norms, softmax, RoPE, the
// loss, the router, the optimizer) computes in float32 on whatever values arrive, as autocast runs them.
// The mode is read when an op records, and its backward keeps it: recomputation inside the scope matches.
// Values stay in float32 tensors (bf16-valued); see docs/training.md, "Precision".
#pragma once
#include "src/autograd/autocast.h"
#include "src/tensor/tensor.h"

namespace titan {

// True when an op on `x` computes its GEMMs in bf16 now (float32 operands inside a bf16 scope).
inline bool autocast_bf16(const Tensor& x) { return x.dtype() == DType::F32 && AutocastScope::current() == DType::BF16; }

// Rounds a contiguous float32 tensor's values to bfloat16 in place (a bf16 op's output, a bf16 reduction's
// gradient); meta tensors are left as they are.
void round_to_bf16_(Tensor& t);
// A contiguous copy of x (never x's own storage, no graph) with its values rounded to bfloat16: what a bf16 cast of
// x, or a bf16 tensor's gradient, holds.
Tensor rounded_to_bf16(const Tensor& x);

// An op autocast runs in bf16 whose kernel takes float32 tensors (attention, as PyTorch's flash attention on
// bf16 tensors: q / k / v cast to bf16, a bf16 output) reads its operand through this: a copy with the values
// rounded to bf16, whose gradient is rounded too (a bf16 tensor's gradient is bf16; the cast back is exact).
// Outside a bf16 scope, for float64, and on meta tensors (the plan is float32; the simulator prices the run's
// dtypes), `x` itself.
Tensor autocast_operand(const Tensor& x);

// An operand a bf16 op saves for its backward, as autocast saves its bf16 cast: the values rounded to bf16 in
// 2-byte storage (a DType::BF16 tensor, contiguous, no graph), half float32's memory. One pack per input: ops
// reading the same tensor (the q / k / v projections of one normed input; gate and up) share it, found again by
// the input's storage, offset and shape and checked value by value (a tensor changed in place gets a new pack).
// Only for real float32 tensors (the caller checks autocast_bf16 and !is_meta(): a meta plan stays float32,
// the simulator prices the run's dtypes).
Tensor bf16_pack(const Tensor& x);
// An elementwise op's operand kept for its backward under bf16 autocast: when x is a real float32 activation
// (its storage charged to activations and not a leaf: a parameter, or FSDP's gathered copy of one, lives anyway)
// whose every value is a bf16 value — a bf16 GEMM's output, as SwiGLU's gate and up are — its bf16 pack (the same
// values in half the bytes; shared with other packs of it); else autograd::saved(x). Lossless either way: the
// backward reads the same float32 values through unpack_bf16.
Tensor saved_maybe_bf16(const Tensor& x);
// Whether a pack of x's values is alive (sequence parallel's re-gather frees only what no pack replaced).
bool has_bf16_pack(const Tensor& x);
// A saved operand's float32 values: a pack unpacked into a fresh float32 tensor; a float32 tensor as it is.
Tensor unpack_bf16(const Tensor& t);
// The bf16 bits of a pack (row-major, contiguous).
const uint16_t* bf16_bits(const Tensor& pack);

}  // namespace titan
