// Scaled-dot-product attention (causal, one sliding window, learned sinks,
// GQA): a client of flex attention with the matching mask.
#include "src/ops/common.h"
#include "src/ops/flex_attention.h"

namespace titan {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                                    const AttentionOptions& opt) {
  const char* op = "scaled_dot_product_attention";
  TITAN_CHECK(opt.window >= 0, op, ": window must be >= 0, got ", opt.window);
  TITAN_CHECK(opt.window == 0 || opt.causal, op, ": a sliding window requires causal attention");
  FlexOptions f;
  if (opt.window > 0) f.mask_mod = sliding_window_mask(opt.window);
  else if (opt.causal) f.mask_mod = causal_mask();
  f.sinks = sinks;
  f.scale = opt.scale;
  return flex_attention(q, k, v, f);
}

}  // namespace titan
