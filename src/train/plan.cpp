#include "src/train/plan.h"

#include <memory>

#include "comms/device_mesh.h"
#include "models/causal_lm.h"
#include "parallel/parallelize.h"
#include "src/ops/ops.h"
#include "src/optim/adamw.h"
#include "src/train/train_spec.h"

namespace titan {

int64_t gradient_accumulation_steps(const JobConfig& cfg, int64_t dp) {
  const int64_t B = cfg.training.local_batch_size;
  const int64_t global_batch = cfg.training.global_batch_size < 0 ? B * dp : cfg.training.global_batch_size;
  TITAN_CHECK(global_batch > 0 && global_batch % (B * dp) == 0, "config error: training.global_batch_size ",
              global_batch, " must be a multiple of local_batch_size x data-parallel ranks = ", B, " x ", dp, " = ",
              B * dp);
  return global_batch / (B * dp);
}

Tensor micro_batch_backward(CausalLM& model, const Tensor& inputs, const Tensor& doc_ids, const Tensor& targets,
                            int64_t accum) {
  Tensor loss = model.loss(model.forward(inputs, doc_ids), targets);  // the logits are freed with the graph
  Tensor aux = model.aux_loss();  // MoE load balancing (not part of the reported loss)
  Tensor total = aux.defined() ? add(loss, aux) : loss;
  (accum == 1 ? total : mul(total, 1.0 / (double)accum)).backward();
  return loss;
}

StepPlan plan_step(const JobConfig& cfg, int world, bool with_events, Device device) {
  TITAN_CHECK(device == Device::Meta || world == 1, "plan_step: a real (cpu) step plays one rank, not ", world);
  StepPlan plan;
  plan.world = world;
  auto& mt = MemoryTracker::get(device);
  const MemoryStats before = mt.stats();
  mt.reset_peak();
  {
    const auto& par = cfg.parallelism;
    comms::DeviceMesh mesh({par.data_parallel_replicate_degree, par.data_parallel_shard_degree,
                            par.tensor_parallel_degree},
                           /*fake=*/true, /*rank=*/0, world);
    plan.layout = mesh.describe();
    plan.dp_degree = mesh.degrees.dp_replicate * mesh.degrees.dp_shard;
    plan.tp_degree = mesh.degrees.tp;
    plan.ep_degree = cfg.parallelism.expert_parallel_degree;
    DeviceScope on(device);
    auto model = train_spec(cfg.model.name).build(cfg.model);
    model->set_activation_checkpoint(cfg.activation_checkpoint.every());
    parallel::ParallelModel pm = train_spec(cfg.model.name).parallelize(
        *model, mesh,
        {cfg.parallelism.fsdp_reshard_after_forward, cfg.parallelism.enable_sequence_parallel,
         cfg.parallelism.expert_parallel_degree, !cfg.parallelism.disable_loss_parallel});
    AdamW opt(pm.named_params(), {cfg.optimizer.lr, cfg.optimizer.beta1, cfg.optimizer.beta2, cfg.optimizer.eps,
                                  cfg.optimizer.weight_decay});
    mt.reset_peak();  // building the full model before sharding is setup, not the step's footprint
    const int64_t B = cfg.training.local_batch_size, S = cfg.training.seq_len;
    plan.accumulation = gradient_accumulation_steps(cfg, plan.dp_degree);
    plan.tokens_per_rank = plan.accumulation * B * S;
    plan.model_flops_per_token = model->flops_per_token(S);
    plan.num_params = model->expected_num_params();
    std::unique_ptr<CostTrace> trace;
    if (with_events) trace = std::make_unique<CostTrace>();
    CostScope cs;
    Tensor tokens = zeros({B, S}, DType::I64);
    // meta document ids: block_causal is priced as causal (its upper bound; the boundaries are data)
    for (int64_t m = 0; m < plan.accumulation; ++m)
      micro_batch_backward(*model, tokens, zeros({B, S}, DType::I64), zeros({B, S}, DType::I64), plan.accumulation);
    opt.step(cfg.optimizer.lr);
    plan.flops = cs.flops();
    plan.bytes = cs.bytes();
    plan.by_op = cs.by_op();
    if (trace) plan.events = trace->take();
    MemoryStats m = mt.stats();
    for (int i = 0; i < kNumMemoryCategories; ++i) {
      m.current[i] -= before.current[i];
      m.peak[i] -= before.current[i];
    }
    m.total_current -= before.total_current;
    m.total_peak -= before.total_current;
    plan.memory = m;
  }
  return plan;
}

}  // namespace titan
