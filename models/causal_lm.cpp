#include "models/causal_lm.h"

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan {

Tensor CausalLM::loss(const Tensor& logits, const Tensor& targets) const {
  TITAN_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                  logits.size(1) == targets.size(1),
              "CausalLM::loss: logits must be [B, S, vocab] and targets [B, S], got ", shape_str(logits.shape()),
              " and ", shape_str(targets.shape()));
  Tensor l2 = logits.reshape({-1, logits.size(2)}), t1 = loss_targets(targets).reshape({-1});
  return sharded_loss ? sharded_loss(l2, t1) : cross_entropy(l2, t1);
}

Tensor ignore_prefix_targets(const Tensor& targets, int64_t prefix, const std::vector<int64_t>& positions) {
  if (prefix <= 1 || targets.is_meta()) return targets;
  NoGradGuard ng;
  Tensor t = targets.contiguous().clone();
  const int64_t B = t.size(0), S = t.size(1);
  TITAN_CHECK(positions.empty() || (int64_t)positions.size() == S, "ignore_prefix_targets: ", positions.size(),
              " positions for targets ", shape_str(t.shape()));
  int64_t* p = t.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      if ((positions.empty() ? i : positions[(size_t)i]) < prefix - 1) p[b * S + i] = -100;
  return t;
}

}  // namespace titan
