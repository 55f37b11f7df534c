// comms/functional.h — collectives as differentiable ops, in adjoint pairs.
//
//   copy_to(x)          fwd identity          bwd all-reduce(sum)   (Megatron CopyToTP)
//   reduce_from(x)      fwd all-reduce(sum)   bwd identity          (ReduceFromTP)
//   all_gather_op(x)    fwd all-gather        bwd reduce-scatter    (FSDP unshard / grad sync)
//   reduce_scatter_op   fwd reduce-scatter    bwd all-gather        (sequence parallel)
//   gather_from(x)      fwd all-gather        bwd split (own slice) (replicated consumers, e.g. logits)
//   split_to(x)         fwd split (own slice) bwd all-gather
//
// What they carry (Wire): activations travel in the step's compute dtype — under bf16 autocast as bf16, forward
// and backward, as TorchTitan's bf16 step moves its activations and their gradients (a gather rounds the values
// it moves, a reduction sums as NCCL sums bf16: ProcessGroup's bf16 wire); float32 outside autocast and float64
// as it is. Parameters' gradients and a norm's statistics always travel in float32 (Wire::float32). The choice is
// made when the op records and its backward keeps it.
//
// An FP8 wire (torchao's float8 tensor parallel under the tensorwise recipe: TorchTitan's Float8ColwiseParallel,
// Float8RowwiseParallel, PrepareFloat8ModuleInput): the values, rounded to the activation wire's dtype first (the
// bf16 tensor torchao casts), cast to FP8 with one scale for the whole gathered tensor (this rank's amax all-reduced
// (max) over the group), moved as 1-byte codes, decoded on arrival and marked as that cast (mark_fp8_operand): the
// FP8 GEMMs reading the result do not cast it again. The values are the gather's followed by the GEMM's cast, bit
// for bit; the wire moves half a bf16 gather's bytes.
//   all_gather_op(x, .., fp8)           fwd all-gather on the FP8 wire   bwd reduce-scatter (activation wire)
//   reduce_scatter_op(x, .., grad_fp8)  fwd reduce-scatter               bwd all-gather on the FP8 wire
#pragma once
#include <optional>
#include <vector>

#include "comms/process_group.h"
#include "src/ops/float8.h"

namespace titan::comms {

enum class Wire { activation, float32 };
// The dtype a transfer of this kind moves values of dtype `values` in now: DType::BF16 for float32 activations
// inside a bf16 autocast scope, else their own (DType::F32 standing for it: ProcessGroup's wire argument). The
// pipeline's and context parallel's point-to-point transfers and the expert dispatch choose theirs here too.
DType wire_dtype(DType values, Wire w = Wire::activation);

Tensor copy_to(const Tensor& x, const PG& pg, Wire w = Wire::activation);
Tensor reduce_from(const Tensor& x, const PG& pg, Wire w = Wire::activation);
Tensor all_gather_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {},
                     ReduceOp grad_op = ReduceOp::Sum, const std::optional<Fp8Cast>& fp8 = std::nullopt);
Tensor reduce_scatter_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {},
                         const std::optional<Fp8Cast>& grad_fp8 = std::nullopt);
// FP8 amaxes (each >= 0, or NaN) all-reduced to their maximum over pg, NaN winning wherever a rank has one (as
// torch.amax over the whole tensor): reduced as the floats' bit patterns (int32), whose order is the values' for
// non-negative floats with NaN above +inf, so the result is exact and independent of the library's order
// (MPI_MAX on floats may drop a NaN). A plan (meta device) prices the all-reduce and leaves the values.
void all_reduce_amax(const PG& pg, std::vector<float>& amax);
// x (float32) gathered along dim on the FP8 wire with cast c (tensorwise), not differentiable: the values an FP8
// GEMM multiplies, marked. `wire`: the activation wire the values are rounded to first (DType::BF16 or F32).
Tensor all_gather_fp8(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes, const Fp8Cast& c,
                      DType wire);
Tensor gather_from(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {});
Tensor split_to(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {});

}  // namespace titan::comms
