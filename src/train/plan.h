// src/train/plan.h — a training step run on meta tensors with a fake process
// group of the simulated world size, in one process: what each rank would
// hold (memory by category, peak) and compute (FLOPs and bytes per op),
// without allocating or computing anything. The simulated UltraServer
// (simulate.h) prices these records on a chip and topology.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "src/config/job_config.h"
#include "src/tensor/cost.h"
#include "src/tensor/memory.h"

namespace titan {

struct StepPlan {
  int world = 1;
  std::string layout;
  MemoryStats memory;  // rank 0, bytes: current (after the step) and peak per category
  double flops = 0, bytes = 0;  // rank 0, one optimizer step
  std::map<std::string, OpCost> by_op;
  double model_flops_per_token = 0;
  int64_t tokens_per_rank = 0;        // per optimizer step: micro-batches x batch x seq
  int64_t accumulation = 1;            // micro-batches per optimizer step
  int64_t dp_degree = 1, tp_degree = 1, ep_degree = 1;
  int64_t num_params = 0;              // the full model's
  std::vector<CostEvent> events;       // rank 0's kernels and collectives in program order (with_events)
};

// The micro-batches of one optimizer step: training.global_batch_size over
// local_batch_size x data-parallel ranks (-1: one); a global batch that is not
// a multiple is refused — by the trainer and the planner alike.
int64_t gradient_accumulation_steps(const JobConfig& cfg, int64_t dp);

// One micro-batch of the step, as the trainer and the planner both run it:
// forward, the loss plus the MoE auxiliary loss, backward of that sum / accum.
// Returns the loss without the auxiliary term (what the step line reports).
Tensor micro_batch_backward(CausalLM& model, const Tensor& inputs, const Tensor& doc_ids, const Tensor& targets,
                            int64_t accum);

// The step runs accumulation micro-batches (forward, loss + MoE auxiliary
// loss, backward each), then the optimizer.
// device Meta (planning) or, for world 1, CPU: the same step really computed
// (tests hold the meta counts and memory to the real ones).
StepPlan plan_step(const JobConfig& cfg, int world, bool with_events = false, Device device = Device::Meta);

}  // namespace titan
