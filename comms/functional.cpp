#include "comms/functional.h"

#include "src/autograd/checkpoint.h"
#include "src/autograd/function.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"

namespace titan::comms {

using autograd::custom_op;
using V = std::vector<Tensor>;

namespace {
std::vector<int64_t> sizes_or_even(const std::vector<int64_t>& sizes, int64_t n, const PG& pg) {
  return sizes.empty() ? chunk_sizes(n, pg->size()) : sizes;
}
Tensor own_slice(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes) {
  int64_t at = 0;
  for (int r = 0; r < pg->rank(); ++r) at += sizes[r];
  return slice(x, dim, at, at + sizes[pg->rank()]).contiguous();
}
}  // namespace

DType wire_dtype(DType values, Wire w) {
  return w == Wire::activation && values == DType::F32 && AutocastScope::current() == DType::BF16 ? DType::BF16
                                                                                                    : DType::F32;
}

Tensor copy_to(const Tensor& x, const PG& pg, Wire w) {
  const DType wire = wire_dtype(x.dtype(), w);
  return custom_op(
      "CopyToParallel", {x}, [](const V& in) { return V{in[0]}; },
      [pg, wire](const V& g) { return V{pg->all_reduce(g[0], ReduceOp::Sum, wire)}; })[0];
}

Tensor reduce_from(const Tensor& x, const PG& pg, Wire w) {
  const DType wire = wire_dtype(x.dtype(), w);
  return custom_op(
      "ReduceFromParallel", {x}, [pg, wire](const V& in) { return V{pg->all_reduce(in[0], ReduceOp::Sum, wire)}; },
      [](const V& g) { return V{g[0]}; })[0];
}

Tensor all_gather_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes, ReduceOp grad_op) {
  dim = wrap_dim(dim, x.dim(), "all_gather_op");
  const DType wire = wire_dtype(x.dtype());
  return custom_op(
      "AllGather", {x}, [=](const V& in) { return V{pg->all_gather(in[0], dim, sizes, wire)}; },
      [=](const V& g) {
        auto s = sizes.empty() ? std::vector<int64_t>(pg->size(), g[0].size(dim) / pg->size()) : sizes;
        return V{pg->reduce_scatter(g[0], dim, grad_op, s, wire)};
      })[0];
}

Tensor reduce_scatter_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes) {
  dim = wrap_dim(dim, x.dim(), "reduce_scatter_op");
  auto s = sizes_or_even(sizes, x.size(dim), pg);
  const DType wire = wire_dtype(x.dtype());
  return custom_op(
      "ReduceScatter", {x},
      [=](const V& in) {  // in TorchTitan's op-level save list: kept, not re-run, by a selective recompute
        return V{autograd::sac_forward(autograd::SacOp::ReduceScatter,
                                       [&] { return pg->reduce_scatter(in[0], dim, ReduceOp::Sum, s, wire); })};
      },
      [=](const V& g) { return V{pg->all_gather(g[0], dim, s, wire)}; })[0];
}

Tensor gather_from(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes) {
  dim = wrap_dim(dim, x.dim(), "gather_from");
  const DType wire = wire_dtype(x.dtype());
  return custom_op(
      "GatherFromParallel", {x}, [=](const V& in) { return V{pg->all_gather(in[0], dim, sizes, wire)}; },
      [=](const V& g) {
        auto s = sizes.empty() ? std::vector<int64_t>(pg->size(), g[0].size(dim) / pg->size()) : sizes;
        return V{own_slice(g[0], dim, pg, s)};
      })[0];
}

Tensor split_to(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes) {
  dim = wrap_dim(dim, x.dim(), "split_to");
  auto s = sizes_or_even(sizes, x.size(dim), pg);
  const DType wire = wire_dtype(x.dtype());
  return custom_op(
      "SplitToParallel", {x}, [=](const V& in) { return V{own_slice(in[0], dim, pg, s)}; },
      [=](const V& g) { return V{pg->all_gather(g[0], dim, s, wire)}; })[0];
}

}  // namespace titan::comms
