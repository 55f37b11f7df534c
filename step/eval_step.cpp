#include "step/eval_step.h"

#include "step/train_step.h"

#include "src/autograd/grad_mode.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"

namespace titan {

double evaluate_loss(decoder::Decoder& model, DataLoader& loader, int64_t steps, parallel::Pipeline* pipeline,
                     comms::DeviceMesh* mesh, DType compute) {
  TITAN_CHECK(steps > 0, "evaluate: no full batch fits (", loader.num_tokens(), " tokens)");
  const bool cp = model.sequence_shard.sharded();
  TITAN_CHECK(!cp || mesh, "evaluate: a context-parallel model needs its mesh");
  NoGradGuard ng;
  AutocastScope autocast(compute);  // the training step's precision
  double total = 0;
  for (int64_t i = 0; i < steps; ++i) {
    Batch whole = loader.next();
    ShardedBatch sb = cp ? shard_for_context_parallel(model, *mesh, whole) : ShardedBatch{whole};
    const Batch& b = sb.batch;
    if (pipeline) {
      const double l = pipeline->eval(b);
      if (sb.loss_weight > 0) total += l * sb.loss_weight;  // 0: no valid target on this rank (a NaN mean)
      continue;
    }
    Tensor logits = model.forward(b.inputs, b.doc_ids);
    if (sb.loss_weight > 0) total += (double)model.loss(logits, b.targets).item<float>() * sb.loss_weight;
  }
  if (cp) total = mesh->cp->all_reduce(from_vector<double>({total}, {1})).to_vector<double>()[0];
  return total / (double)steps;
}

}  // namespace titan
