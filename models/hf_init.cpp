#include "models/hf_init.h"

#include "src/autograd/grad_mode.h"
#include "src/log/log.h"
#include "src/ops/ops.h"

namespace titan {

void hf_init_weights(const std::vector<std::pair<std::string, Tensor*>>& named_params, uint64_t seed) {
  Generator g(seed);
  NoGradGuard ng;
  int64_t total = 0;
  for (auto& [name, p] : named_params) total += p->is_meta() ? 0 : p->numel();
  Progress progress("initializing weights", std::max<int64_t>(total, 1), "parameters");
  for (auto& [name, p] : named_params) {
    if (p->is_meta()) continue;
    const bool is_norm = name.find("norm") != std::string::npos;
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    if (is_bias) fill_(*p, 0.0);
    else if (is_norm) fill_(*p, 1.0);
    else copy_(*p, randn(p->shape(), g, p->dtype(), 0.02));
    progress.add(p->numel());
  }
  progress.finish();
}

}  // namespace titan
