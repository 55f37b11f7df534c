#include "src/train/eval.h"

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan {

double evaluate_loss(CausalLM& model, DataLoader& loader, int64_t steps, parallel::Pipeline* pipeline) {
  TITAN_CHECK(steps > 0, "evaluate: no full batch fits (", loader.num_tokens(), " tokens)");
  NoGradGuard ng;
  double total = 0;
  for (int64_t i = 0; i < steps; ++i) {
    Batch b = loader.next();
    if (pipeline) {
      total += pipeline->eval(b);
      continue;
    }
    Tensor logits = model.forward(b.inputs, b.doc_ids);
    total += (double)model.loss(logits, b.targets).item<float>();
  }
  return total / (double)steps;
}

}  // namespace titan
