// Fused rotate-half RoPE. x [B, S, nH, D], cos/sin [S, D/2].
#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
// kInverse = false: rotate by +theta (forward); true: by -theta (backward)
template <bool kInverse>
Tensor rope_apply(const char* name, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  // eager (TorchTitan's): float(), view_as_complex * freqs, view_as_real, type_as
  record_cost(name, 3.0 * (double)x.numel(), bytes_of({&x, &y}) + bytes_of({&cos, &sin}), EagerSplit{4, 5.0});
  if (x.is_meta()) return y;
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2), D = x.size(3), h = D / 2;
  Tensor xc = x.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
  dispatch_float(x.dtype(), name, [&]<typename T>() {
    const T* px = xc.data<T>();
    const T* pc = cc.data<T>();
    const T* ps = sc.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for collapse(2) schedule(static) if (x.numel() >= kParallelGrain)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const T* c = pc + s * h;
        const T* sn = ps + s * h;
        for (int64_t hh = 0; hh < H; ++hh) {
          const T* xr = px + ((b * S + s) * H + hh) * D;
          T* yr = py + ((b * S + s) * H + hh) * D;
#pragma omp simd
          for (int64_t j = 0; j < h; ++j) {
            const T x1 = xr[j], x2 = xr[j + h];
            const T sj = kInverse ? -sn[j] : sn[j];
            yr[j] = x1 * c[j] - x2 * sj;
            yr[j + h] = x2 * c[j] + x1 * sj;
          }
        }
      }
  });
  return y;
}
}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  same_device("rope", {&x, &cos, &sin});
  need_float("rope", x);
  same_dtype("rope", x, cos);
  same_dtype("rope", x, sin);
  TITAN_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "rope: expected x [B, S, nH, D] with even D, got ",
              shape_str(x.shape()));
  const Shape want = {x.size(1), x.size(3) / 2};
  TITAN_CHECK(cos.shape() == want && sin.shape() == want, "rope: cos/sin must be [S, D/2] = ", shape_str(want),
              ", got ", shape_str(cos.shape()), " and ", shape_str(sin.shape()));
  Tensor y = rope_apply<false>("rope", x, cos, sin);
  return record("rope", {x}, y, [c = saved(cos), s = saved(sin)](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{rope_apply<true>("rope_backward", g[0], c, s)};
  });
}

}  // namespace titan
