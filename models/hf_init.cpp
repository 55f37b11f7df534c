#include "models/hf_init.h"

#include "src/autograd/grad_mode.h"
#include "src/log/log.h"
#include "src/ops/ops.h"

namespace titan {

void hf_init_weights(const std::vector<std::pair<std::string, Tensor*>>& named_params,
                     const std::vector<nn::ParamInit>& inits, uint64_t seed) {
  TITAN_CHECK(inits.size() == named_params.size(), "hf_init_weights: ", inits.size(), " inits for ",
              named_params.size(), " parameters");
  Generator g(seed);
  NoGradGuard ng;
  int64_t total = 0;
  for (auto& [name, p] : named_params) total += p->is_meta() ? 0 : p->numel();
  Progress progress("initializing weights", std::max<int64_t>(total, 1), "parameters");
  for (size_t i = 0; i < named_params.size(); ++i) {
    Tensor* p = named_params[i].second;
    if (p->is_meta()) continue;
    if (inits[i] == nn::ParamInit::zeros) fill_(*p, 0.0);
    else if (inits[i] == nn::ParamInit::ones) fill_(*p, 1.0);
    else copy_(*p, randn(p->shape(), g, p->dtype(), 0.02));
    progress.add(p->numel());
  }
  progress.finish();
}

}  // namespace titan
