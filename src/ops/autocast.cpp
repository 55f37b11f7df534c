// bf16 autocast's value roundings (src/ops/autocast.h).
#include "src/ops/autocast.h"

#include <algorithm>

#include "src/autograd/function.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {

void round_to_bf16_(Tensor& t) {
  if (t.is_meta() || t.numel() == 0) return;
  TITAN_CHECK(t.dtype() == DType::F32 && t.is_contiguous(), "round_to_bf16_: a contiguous float32 tensor expected, got ",
              dtype_name(t.dtype()), " ", shape_str(t.shape()));
  float* p = t.data<float>();
  const int64_t n = t.numel(), chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; i += chunk) round_to_bf16(p + i, std::min(chunk, n - i));
}

Tensor autocast_operand(const Tensor& x) {
  if (!x.defined() || !autocast_bf16(x) || x.is_meta()) return x;
  Tensor r;
  {
    NoGradGuard ng;
    r = x.contiguous();
    if (r.impl() == x.impl()) r = x.clone();  // a copy: x's own values stay float32
  }
  round_to_bf16_(r);
  return autograd::record("autocast_to_bf16", {x}, r, [](const std::vector<Tensor>& g) {
    // x's gradient is the bf16 operand's (a bf16 tensor's gradient is bf16), cast back exactly
    Tensor gx;
    {
      NoGradGuard ng;
      gx = g[0].contiguous();
      if (gx.impl() == g[0].impl()) gx = g[0].clone();
    }
    round_to_bf16_(gx);
    return std::vector<Tensor>{gx};
  });
}

}  // namespace titan
