#include "comms/functional.h"

#include <bit>
#include <cmath>
#include <limits>

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

void all_reduce_amax(const PG& pg, std::vector<float>& amax) {
  const int64_t n = (int64_t)amax.size();
  if (default_device() == Device::Meta) {  // a plan: the collective priced, the values unchanged
    pg->all_reduce(empty({n}, DType::F32, Device::Meta), ReduceOp::Max);
    return;
  }
  std::vector<int32_t> bits(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) {
    TITAN_CHECK(!(amax[i] < 0), "all_reduce_amax: amaxes are >= 0 (or NaN), got ", amax[i], " (group '", pg->name(), "')");
    bits[i] = std::bit_cast<int32_t>(std::isnan(amax[i]) ? std::numeric_limits<float>::quiet_NaN() : amax[i]);
  }
  const std::vector<int32_t> got = pg->all_reduce(from_vector<int32_t>(bits, {n}), ReduceOp::Max).to_vector<int32_t>();
  for (size_t i = 0; i < amax.size(); ++i) amax[i] = std::bit_cast<float>(got[i]);
}

Tensor all_gather_fp8(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes, const Fp8Cast& c,
                      DType wire) {
  NoGradGuard ng;
  TITAN_CHECK(x.dtype() == DType::F32 && x.dim() >= 1, "all_gather_fp8: a float32 tensor expected, got ",
              dtype_name(x.dtype()), " ", shape_str(x.shape()), " (group '", pg->name(), "')");
  dim = wrap_dim(dim, x.dim(), "all_gather_fp8");
  Tensor t;
  {
    CostRecordPause pause;  // the gathered dim moved first and the wire's rounding: the emulation's, no GPU kernel
    t = (dim == 0 ? x : transpose(x, 0, dim)).contiguous();  // [R, ...]
    if (wire == DType::BF16 && !t.is_meta()) t = rounded_to_bf16(t);
  }
  const Shape ts = t.shape();
  const int64_t R = ts[0], C = R > 0 ? t.numel() / R : numel(Shape(ts.begin() + 1, ts.end()));
  const Fp8Codes codes = fp8_encode(t.reshape({R, C}), c, [&](std::vector<float>& amax) { all_reduce_amax(pg, amax); });
  const Tensor got = pg->all_gather(codes.codes, 0, sizes);  // [sum of R, C] codes, one byte each
  CostRecordPause pause;
  Shape os = ts;
  os[0] = got.size(0);
  Tensor out = fp8_decode(got, c, codes.scale).reshape(os);  // marked
  if (dim == 0) return out;
  out = transpose(out, 0, dim).contiguous();
  mark_fp8_operand(out, c);
  return out;
}

Tensor all_gather_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes, ReduceOp grad_op,
                     const std::optional<Fp8Cast>& fp8) {
  dim = wrap_dim(dim, x.dim(), "all_gather_op");
  const DType wire = wire_dtype(x.dtype());
  return custom_op(
      "AllGather", {x},
      [=](const V& in) {
        return V{fp8 ? all_gather_fp8(in[0], dim, pg, sizes, *fp8, wire) : pg->all_gather(in[0], dim, sizes, wire)};
      },
      [=](const V& g) {
        auto s = sizes.empty() ? std::vector<int64_t>(pg->size(), g[0].size(dim) / pg->size()) : sizes;
        return V{pg->reduce_scatter(g[0], dim, grad_op, s, wire)};
      })[0];
}

Tensor reduce_scatter_op(const Tensor& x, int64_t dim, const PG& pg, const std::vector<int64_t>& sizes,
                         const std::optional<Fp8Cast>& grad_fp8) {
  dim = wrap_dim(dim, x.dim(), "reduce_scatter_op");
  auto s = sizes_or_even(sizes, x.size(dim), pg);
  const DType wire = wire_dtype(x.dtype());
  return custom_op(
      "ReduceScatter", {x},
      [=](const V& in) {  // in TorchTitan's op-level save list: kept, not re-run, by a selective recompute
        return V{autograd::sac_forward(autograd::SacOp::ReduceScatter,
                                       [&] { return pg->reduce_scatter(in[0], dim, ReduceOp::Sum, s, wire); })};
      },
      [=](const V& g) {
        return V{grad_fp8 ? all_gather_fp8(g[0], dim, pg, s, *grad_fp8, wire) : pg->all_gather(g[0], dim, s, wire)};
      })[0];
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
