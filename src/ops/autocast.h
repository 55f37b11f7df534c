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

}  // namespace titan
