// comms/functional.h — collectives as differentiable ops, in adjoint pairs.
//
//   copy_to(x)          fwd identity          bwd all-reduce(sum)   (Megatron CopyToTP)
//   reduce_from(x)      fwd all-reduce(sum)   bwd identity          (ReduceFromTP)
//   all_gather_op(x)    fwd all-gather        bwd reduce-scatter    (FSDP unshard / grad sync)
//   reduce_scatter_op   fwd reduce-scatter    bwd all-gather        (sequence parallel)
//   gather_from(x)      fwd all-gather        bwd split (own slice) (replicated consumers, e.g. logits)
//   split_to(x)         fwd split (own slice) bwd all-gather
#pragma once
#include <vector>

#include "comms/process_group.h"

namespace titan::comms {

Tensor copy_to(const Tensor& x, const PG& pg);
Tensor reduce_from(const Tensor& x, const PG& pg);
Tensor all_gather_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {},
                     ReduceOp grad_op = ReduceOp::Sum);
Tensor reduce_scatter_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {});
Tensor gather_from(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {});
Tensor split_to(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes = {});

}  // namespace titan::comms
