// src/autograd/autocast.h — the autocast mode: the dtype this thread's GEMM ops compute in (RAII, as
// grad_mode.h's switches). What the mode does to the ops: src/ops/autocast.h. Activation checkpointing
// recomputes a block in the mode its forward ran in (checkpoint.cpp keeps it), as PyTorch's checkpoint does.
#pragma once
#include "src/tensor/dtype.h"

namespace titan {

class AutocastScope {
 public:
  explicit AutocastScope(DType compute);  // DType::BF16, or DType::F32 (turns it off within)
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  static DType current();  // F32 outside any scope

 private:
  DType prev_;
};

}  // namespace titan
